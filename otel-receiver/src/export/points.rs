//! Points out of a GPU's view: every metric of the table ([`super::catalogue`]) with its value
//! and attributes, the per-process and per-assignment series, the counters since the agent
//! started, the health state, and the agent's own delivery counts. The export state caches them
//! once per window ([`ExportState::points`]).
//!
//! **Which points name the owner** (docs/EXPORT.md, "Series budget"): a gauge carries the GPU's
//! identity and its own attributes only, so an owner change starts no new gauge series. The
//! owner (process, container, pod, job) rides on the per-owner counters, the per-process points,
//! and the one `gpuslack.job.info` point per GPU, through which any gauge joins its current
//! owner (`* on (instance, hw_id) group_left (gpuslack_job_id) gpuslack_job_info`).

use std::sync::Arc;

use super::catalogue::*;
use super::dcgm;
use super::delivery::Counts;
use super::point::{mig_profile, owner_attributes, pod_attributes, Attributes, Point, OWNER_KEYS};
use super::selection::Shape;
use super::state::{ExportState, GpuView, COUNTED_ERRORS};
use crate::attribution::GpuProcess;
use crate::diagnosis::Class;
use crate::sample::Metric;

impl ExportState {
    /// Every point of every GPU, made once per window and shared by a collection's
    /// instruments and the scrapes.
    pub fn points(&self) -> Arc<Vec<Point>> {
        let selection = self.selection();
        let make = || -> Arc<Vec<Point>> {
            self.mark_collected();
            let mut out: Vec<Point> = self
                .gpus()
                .flat_map(|view| {
                    let mut points = shaped_points(view, self.top_processes(), selection.shape());
                    if selection.pod_labels() {
                        with_pod(view, &mut points);
                    }
                    points
                })
                .filter(|p| selection.includes(&p.def))
                .collect();
            if selection.has_dcgm_fields() {
                let node = dcgm::NodeContext {
                    hostname: dcgm::hostname(),
                    gpus: self.gpus().filter(|v| v.facts.mig_parent.is_none()).count(),
                    pod_labels: selection.pod_labels(),
                };
                out.extend(
                    self.gpus()
                        .flat_map(|view| dcgm::points(view, &node))
                        .filter(|p| selection.includes(&p.def)),
                );
            }
            Arc::new(out)
        };
        // A poisoned cache only means a panic elsewhere mid-fill: make the points afresh.
        let Ok(mut cached) = self.points_cache().lock() else {
            return make();
        };
        cached.get_or_insert_with(make).clone()
    }
}

impl ExportState {
    /// Series per GPU of the configured set now (points of the GPU's own, without the agent's):
    /// what a backend that bills series pays for each GPU; `run --usage` prints it.
    pub fn series_per_gpu(&self) -> std::collections::BTreeMap<u32, usize> {
        let mut out: std::collections::BTreeMap<u32, usize> =
            self.gpus().map(|v| (v.gpu, 0)).collect();
        let index_of: std::collections::BTreeMap<String, u32> =
            self.gpus().map(|v| (v.gpu.to_string(), v.gpu)).collect();
        // dcgm-exporter's fields name a GPU by its UUID (`gpu` is a MIG instance's parent's).
        let uuid_of: std::collections::BTreeMap<&str, u32> = self
            .gpus()
            .filter_map(|v| v.facts.uuid.as_deref().map(|u| (u, v.gpu)))
            .collect();
        for p in self.points().iter() {
            let gpu = p.attributes.iter().find_map(|(k, v)| match *k {
                "gpuslack.gpu.index" => index_of.get(v),
                "UUID" => uuid_of.get(v.as_str()),
                _ => None,
            });
            let gpu = gpu.or_else(|| {
                p.attributes
                    .iter()
                    .find(|(k, _)| *k == "gpu")
                    .and_then(|(_, v)| index_of.get(v))
            });
            if let Some(gpu) = gpu {
                *out.entry(*gpu).or_default() += 1;
            }
        }
        out
    }

    /// `run --usage`'s line on the series: the set, the series of each GPU and the most.
    pub fn series_usage(&self) -> String {
        let per_gpu = self.series_per_gpu();
        let most = per_gpu.values().copied().max().unwrap_or(0);
        let each: Vec<String> = per_gpu
            .iter()
            .map(|(gpu, n)| format!("GPU {gpu} {n}"))
            .collect();
        format!(
            "series per GPU ({} metric set): {most} at most ({}); docs/EXPORT.md, \"What it costs\"",
            self.selection().set().name(),
            each.join(", ")
        )
    }
}

/// Puts the GPU's pod ([`pod_attributes`]) on every gauge that names no owner yet (the GPU's
/// readings, its verdict, its info). A point that names an owner (a process, the job, an
/// assignment) keeps its own; a counter too: one renamed by its pod would start again from
/// everything it counted, which a delta backend would count twice (the per-owner counters
/// name the pod already).
fn with_pod(view: &GpuView, points: &mut [Point]) {
    let pod = pod_attributes(&view.report);
    if pod.is_empty() {
        return;
    }
    for p in points {
        let owned = p.attributes.iter().any(|(k, _)| OWNER_KEYS.contains(k));
        if !owned && p.def.kind != Kind::Counter {
            p.attributes.extend(pod.iter().cloned());
        }
    }
}

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
                ("reason", reason.as_str().into()),
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
    for (signal, held) in &c.queues {
        let signal = || vec![("signal", signal.as_str().to_string())];
        push(AGENT_QUEUE_USAGE, held.bytes as u64, signal());
        push(AGENT_QUEUE_LIMIT, held.max_bytes as u64, signal());
        push(AGENT_QUEUE_BATCHES, held.batches as u64, signal());
    }
    out
}

/// The attributes that identify a GPU on every point (hardware semantic conventions).
fn identity_attributes(view: &GpuView) -> Attributes {
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
        ("gpuslack.gpu.index", view.gpu.to_string()),
    ];
    // The model only: `hw.name` would repeat it, one label of the 20 a series may carry.
    if let Some(name) = &f.name {
        attrs.push(("hw.model", name.clone()));
    }
    if let Some(driver) = &f.driver {
        attrs.push(("hw.driver_version", driver.clone()));
    }
    if let Some(parent) = f.mig_parent {
        attrs.push(("gpuslack.mig.parent_index", parent.to_string()));
        if let Some(profile) = f.name.as_deref().and_then(mig_profile) {
            attrs.push(("gpuslack.mig.profile", profile.to_string()));
        }
    }
    attrs
}

/// The GPU's identity and its current owner: the attributes of a log record. An event is no
/// series, so naming the owner on it costs no series, and a record read on its own (a
/// collector's log pipeline, a Datadog event) has no info series to join.
pub fn event_attributes(view: &GpuView) -> Attributes {
    let mut attrs = identity_attributes(view);
    attrs.extend(owner_attributes(&view.report));
    attrs
}

/// A point's whole attribute set: the base's (the GPU's identity, with its owner for a process
/// or counter point), then the point's own, which replace any of the base's with the same key
/// (a process point names its own process where the GPU names its single owner; a key twice is
/// an invalid Prometheus series and an ambiguous OTLP point).
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

/// The per-process points of one GPU: its `top` processes by SM share, each with the GPU's
/// owner (its container, pod and job) under the process's own attributes. A process series is
/// the process's anyway, so the owner's labels start no series its pid would not.
fn process_points(
    view: &GpuView,
    top: usize,
    push: &mut dyn FnMut(MetricDef, Option<f64>, Attributes),
) {
    let Some(processes) = view.report.stats.processes.as_deref() else {
        return;
    };
    let owner = owner_attributes(&view.report);
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
        let owned = |extra: Option<(&'static str, String)>| {
            let own: Attributes = attrs.iter().cloned().chain(extra).collect();
            point_attributes(&owner, &own)
        };
        push(PROCESS_SM, p.sm_pct.map(|v| v / 100.0), owned(None));
        push(PROCESS_MEMORY, p.gpu_mem_bytes, owned(None));
        let thread = |t: &str| Some(("gpuslack.thread", t.to_string()));
        push(
            PROCESS_CPU,
            p.cpu_pct.map(|v| v / 100.0),
            owned(thread("all")),
        );
        push(
            PROCESS_CPU,
            p.thread_pct.map(|v| v / 100.0),
            owned(thread("busiest")),
        );
    }
}

/// One point per Kubernetes container the GPU is assigned to: where pods share a GPU, no pod
/// owns its series, and these name each of them.
fn assignment_points(view: &GpuView, push: &mut dyn FnMut(MetricDef, Option<f64>, Attributes)) {
    let Some(pods) = view.report.stats.pods.as_deref() else {
        return;
    };
    for p in pods.iter().take(MAX_ASSIGNMENT_SERIES) {
        let attrs = vec![
            ("k8s.pod.name", p.pod.clone()),
            ("k8s.namespace.name", p.namespace.clone()),
            ("k8s.container.name", p.container.clone()),
        ];
        push(POD_ASSIGNMENT, Some(1.0), attrs);
    }
}

/// What dcgm-exporter users look for beside the diagnosis: the graphics engine, the memory
/// controller, the FP64 pipe, the performance state, BAR1, the PCIe link, the fans and the
/// NVLinks' state. Each where the source read it: a board without fans has no fan point.
fn device_points(view: &GpuView, push: &mut dyn FnMut(MetricDef, Option<f64>, Attributes)) {
    let w = &view.report.stats;
    let attr = |k: &'static str, v: &str| vec![(k, v.to_string())];
    push(GR_ENGINE_ACTIVITY, share(w.mean(Metric::GpmGr)), vec![]);
    push(
        MEMORY_CONTROLLER_UTILIZATION,
        share(w.mean(Metric::UtilMem)),
        vec![],
    );
    push(
        PIPE_ACTIVITY,
        share(w.mean(Metric::GpmFp64)),
        attr("gpuslack.pipe", "fp64"),
    );
    push(PERFORMANCE_STATE, w.max(Metric::Pstate), vec![]);
    push(BAR1_USAGE, view.held(Metric::Bar1UsedBytes), vec![]);
    push(BAR1_LIMIT, view.held(Metric::Bar1TotalBytes), vec![]);
    for (def, current, max) in [
        (
            PCIE_LINK_GENERATION,
            Metric::PcieLinkGen,
            Metric::PcieLinkGenMax,
        ),
        (
            PCIE_LINK_WIDTH,
            Metric::PcieLinkWidth,
            Metric::PcieLinkWidthMax,
        ),
    ] {
        let bound = |b: &str| attr("gpuslack.pcie.link.bound", b);
        push(def, view.held(current), bound("current"));
        push(def, view.held(max), bound("max"));
    }
    push(FAN_SPEED_RATIO, share(view.held(Metric::FanPct)), vec![]);
    push(
        NVLINK_LINKS,
        view.held(Metric::NvlinkLinksUp),
        attr("gpuslack.nvlink.state", "up"),
    );
    push(
        NVLINK_LINKS,
        view.held(Metric::NvlinkLinksDown),
        attr("gpuslack.nvlink.state", "down"),
    );
    // Per link only where it says something: a link with errors, or one that is down (its
    // series then names it). 18 healthy links make no series; the worst case is 18 × 3.
    for l in view.nvlinks() {
        let erring = [l.crc, l.replay, l.recovery]
            .iter()
            .any(|n| n.is_some_and(|n| n > 0));
        if !erring && l.up {
            continue;
        }
        for (kind, n) in [
            ("crc", l.crc),
            ("replay", l.replay),
            ("recovery", l.recovery),
        ] {
            let attrs = vec![
                ("gpuslack.nvlink.link", l.link.to_string()),
                ("error.type", kind.to_string()),
            ];
            push(NVLINK_LINK_ERRORS, n.map(|n| n as f64), attrs);
        }
    }
}

/// The GPU's `gpuslack.gpu.info` point: what identifies the board (its model, driver, VBIOS,
/// serial number and PCI bus id) on one series, so that the gauges need carry `hw.id` only.
fn gpu_info_point(view: &GpuView, out: &mut Vec<Point>) {
    let f = &view.facts;
    let mut attributes = identity_attributes(view);
    for (key, value) in [
        ("hw.firmware_version", &f.vbios),
        ("hw.serial_number", &f.serial),
        ("gpuslack.gpu.pci_bus_id", &f.pci_bus_id),
    ] {
        if let Some(v) = value {
            attributes.push((key, v.clone()));
        }
    }
    out.push(Point {
        def: GPU_INFO,
        value: 1.0,
        attributes,
    });
}

/// The GPU's Xid events by code, with the catalogue's action for each: a GPU-level series per
/// code seen (never per owner: an Xid is the GPU's), at most [`super::state::MAX_XID_CODES`] and `other`.
fn xid_points(view: &GpuView, out: &mut Vec<Point>) {
    let identity: Attributes = identity_attributes(view)
        .into_iter()
        .filter(|(k, _)| matches!(*k, "hw.type" | "hw.id" | "gpuslack.gpu.index"))
        .collect();
    for (code, n) in view.xid_codes() {
        let action = code
            .parse::<u32>()
            .ok()
            .and_then(crate::hw_health::lookup)
            .map_or("unknown", |x| x.action.as_str());
        let mut attributes = identity.clone();
        attributes.push(("gpuslack.xid.code", code.to_string()));
        attributes.push(("gpuslack.xid.action", action.to_string()));
        out.push(Point {
            def: XID_ERRORS,
            value: n,
            attributes,
        });
    }
}

/// The GPU's `gpuslack.job.info` point: its identity (`hw.id` and index only: the job's own
/// attributes fill the rest of the label budget), its job's, and who holds it now (the current
/// owner's process, container and pod, where the job's do not already say): the one series
/// per GPU that a gauge, which names no owner, joins on `hw_id` to learn its owner. The job's
/// attributes win where both name a key: an `allocated_idle` GPU keeps the job its dead rank
/// ran, and no process owns it.
fn job_info_point(view: &GpuView, out: &mut Vec<Point>) {
    let Some(job) = view.job() else {
        return;
    };
    let identity = identity_attributes(view);
    let gpu: Attributes = identity
        .into_iter()
        .filter(|(k, _)| matches!(*k, "hw.id" | "gpuslack.gpu.index"))
        .collect();
    let mut attributes = point_attributes(
        &point_attributes(&gpu, &owner_attributes(&view.report)),
        &job.attributes,
    );
    attributes.push(("gpuslack.job.state", job.state.to_string()));
    out.push(Point {
        def: JOB_INFO,
        value: 1.0,
        attributes,
    });
}

fn share(pct: Option<f64>) -> Option<f64> {
    pct.map(|p| p / 100.0)
}

/// Every point of every metric for one GPU, with its `top` processes, in the full shape. A
/// metric the source did not sample has no point; a health counter read as zero is a point of 0.
pub fn points(view: &GpuView, top: usize) -> Vec<Point> {
    shaped_points(view, top, Shape::Full)
}

/// Every point of every metric for one GPU in `shape` ([`Shape`]: the lean one makes one series
/// of the verdict and of the health state, no series of a zero that never moved, and counters
/// per owner only for the owner's energy and verdict time).
pub fn shaped_points(view: &GpuView, top: usize, shape: Shape) -> Vec<Point> {
    let lean = shape == Shape::Lean;
    // In the lean shape, a health count or an engine's use is a series once it was above zero.
    let moved = |m: Metric| !lean || view.ever_nonzero(m);
    let r = &view.report;
    let s = &r.signals;
    let w = &r.stats;
    let gpu = identity_attributes(view);
    let mut out = Vec::with_capacity(96);
    // A gauge: the latest window's value, named by the GPU's identity alone (not its owner: an
    // owner change must not start a new series of every gauge).
    let mut push = |def: MetricDef, value: Option<f64>, own: Attributes| {
        if let Some(value) = value.filter(|v| v.is_finite()) {
            out.push(Point {
                def,
                value,
                attributes: point_attributes(&gpu, &own),
            });
        }
    };
    let attr = |k: &'static str, v: &str| vec![(k, v.to_string())];
    push(HW_POWER, s.power_w, vec![]);
    for (task, value) in [
        ("general", s.util_pct),
        (
            "encoder",
            w.mean(Metric::UtilEnc)
                .or(view.held(Metric::UtilEnc))
                .filter(|_| moved(Metric::UtilEnc)),
        ),
        (
            "decoder",
            w.mean(Metric::UtilDec)
                .or(view.held(Metric::UtilDec))
                .filter(|_| moved(Metric::UtilDec)),
        ),
    ] {
        push(HW_GPU_UTILIZATION, share(value), attr("hw.gpu.task", task));
    }
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
    push(MEMORY_SWING, w.mem_swing_bytes_per_s, vec![]);
    push(
        HW_TEMPERATURE,
        w.max(Metric::TempC),
        attr("hw.sensor_location", "gpu"),
    );
    push(
        HW_TEMPERATURE,
        view.held(Metric::MemTempC),
        attr("hw.sensor_location", "memory"),
    );
    push(
        HW_TEMPERATURE_LIMIT,
        view.held(Metric::TempSlowdownC)
            .or(view.facts.temp_slowdown_c),
        vec![
            ("hw.sensor_location", "gpu".into()),
            ("hw.limit_type", "high.degraded".into()),
        ],
    );
    if let Some(state) = health_state(view) {
        for candidate in ["ok", "degraded", "failed"] {
            let value = if candidate == state { 1.0 } else { 0.0 };
            // Lean: the state the GPU is in, one series; the zeros of the others say nothing.
            if !lean || value > 0.0 {
                push(HW_STATUS, Some(value), attr("hw.state", candidate));
            }
        }
    }
    push(SM_ACTIVITY, share(s.sm_pct), vec![]);
    push(SM_OCCUPANCY, share(s.occupancy_pct), vec![]);
    for (pipe, value) in [
        ("tensor", s.tensor_pct),
        ("fp32", s.fp32_pct),
        ("fp16", s.fp16_pct),
        ("integer", s.integer_pct),
    ] {
        push(PIPE_ACTIVITY, share(value), attr("gpuslack.pipe", pipe));
    }
    push(DRAM_ACTIVITY, share(s.dram_pct), vec![]);
    let hz = |mhz: Option<f64>| mhz.map(|m| m * 1e6);
    push(CLOCK_SM, hz(w.mean(Metric::SmMhz)), vec![]);
    push(CLOCK_MEMORY, hz(w.mean(Metric::MemMhz)), vec![]);
    push(POWER_LIMIT, view.facts.power_limit_w, vec![]);
    push(POWER_MIN_LIMIT, view.facts.power_limit_min_w, vec![]);
    push(POWER_MAX_LIMIT, view.facts.power_limit_max_w, vec![]);
    push(POWER_TDP, r.tdp_w, vec![]);
    if w.clock_reasons.samples() > 0 {
        for (i, (reason, share)) in w.clock_reasons.shares().enumerate() {
            // Lean: a reason never seen is no series.
            if lean && !view.throttle_seen(i) {
                continue;
            }
            push(
                THROTTLE,
                Some(share),
                attr("gpuslack.throttle.reason", reason),
            );
        }
    }
    push(EFFICIENCY, r.efficiency, vec![]);
    push(EFFICIENCY_CALIBRATED, r.calibrated_efficiency, vec![]);
    push(POWER_EXPECTED, r.expected_power_w, vec![]);
    // The unit the figure measures rides on a bounded attribute (`Resource`'s fixed names):
    // one series a GPU at a time, as the verdict's own.
    if let Some(h) = r.headroom {
        push(
            HEADROOM,
            Some(h.fraction),
            attr(HEADROOM_UNIT, h.resource.as_str()),
        );
    }
    // The verdict's confidence rides on every class's point, so the series stay one per class
    // (a label set that only the current class carried would change shape with every verdict).
    for class in Class::ALL {
        let current = if class == r.class { 1.0 } else { 0.0 };
        // Lean: one series, the current verdict's (a one-hot of nine is one series).
        if lean && current == 0.0 {
            continue;
        }
        push(
            DIAGNOSIS,
            Some(current),
            vec![
                ("gpuslack.diagnosis.class", class.as_str().into()),
                (
                    "gpuslack.diagnosis.confidence",
                    r.confidence().as_str().into(),
                ),
            ],
        );
    }
    for (metric, kind, counter) in [
        (Metric::EccVolatileCorrected, "corrected", "volatile"),
        (Metric::EccVolatileUncorrected, "uncorrected", "volatile"),
        (Metric::EccAggregateCorrected, "corrected", "aggregate"),
        (Metric::EccAggregateUncorrected, "uncorrected", "aggregate"),
    ] {
        push(
            ECC_ERRORS,
            view.held(metric).filter(|_| moved(metric)),
            vec![
                ("error.type", kind.into()),
                ("gpuslack.ecc.counter", counter.into()),
            ],
        );
    }
    push(
        REMAPPED_ROWS,
        view.held(Metric::RemapCorrected)
            .filter(|_| moved(Metric::RemapCorrected)),
        attr("error.type", "corrected"),
    );
    push(
        REMAPPED_ROWS,
        view.held(Metric::RemapUncorrected)
            .filter(|_| moved(Metric::RemapUncorrected)),
        attr("error.type", "uncorrected"),
    );
    for (def, m) in [
        (REMAP_PENDING, Metric::RemapPending),
        (REMAP_FAILED, Metric::RemapFailed),
    ] {
        push(def, view.held(m).filter(|_| moved(m)), vec![]);
    }
    push(
        RETIRED_PAGES,
        view.held(Metric::RetiredSingleBit)
            .filter(|_| moved(Metric::RetiredSingleBit)),
        attr("gpuslack.retirement.cause", "single_bit"),
    );
    push(
        RETIRED_PAGES,
        view.held(Metric::RetiredDoubleBit)
            .filter(|_| moved(Metric::RetiredDoubleBit)),
        attr("gpuslack.retirement.cause", "double_bit"),
    );
    for (def, m) in [
        (RETIREMENT_PENDING, Metric::RetiredPending),
        (XID_LAST, Metric::XidLast),
    ] {
        push(def, view.held(m).filter(|_| moved(m)), vec![]);
    }
    device_points(view, &mut push);
    process_points(view, top, &mut push);
    assignment_points(view, &mut push);
    job_info_point(view, &mut out);
    gpu_info_point(view, &mut out);
    xid_points(view, &mut out);
    match shape {
        Shape::Full => counter_points(view, &mut out),
        Shape::Lean => lean_counter_points(view, &mut out),
    }
    out
}

/// The lean shape's counters. Per owner, only what a job's cost needs: its energy and its time
/// (and, where selected, energy) in each verdict it had, so that a job's and a team's waste
/// add up to the GPU-second. Every other counter is the GPU's, one series whoever holds it
/// (never renamed, so a delta backend never counts one twice), and an error kind is a series
/// once it counted one.
fn lean_counter_points(view: &GpuView, out: &mut Vec<Point>) {
    let s = &view.report.signals;
    let identity = identity_attributes(view);
    for (owner, c) in view.owners() {
        let base: Attributes = identity.iter().chain(owner).cloned().collect();
        let mut push = |def: MetricDef, value: f64, own: Attributes| {
            out.push(Point {
                def,
                value,
                attributes: point_attributes(&base, &own),
            });
        };
        push(HW_ENERGY, c.energy_j, vec![]);
        for class in Class::ALL {
            let Some(spent) = c.spent.get(&class).filter(|s| s.seconds > 0.0) else {
                continue;
            };
            let class_attr = || vec![("gpuslack.diagnosis.class", class.as_str().to_string())];
            push(DIAGNOSIS_TIME, spent.seconds, class_attr());
            push(DIAGNOSIS_ENERGY, spent.energy_j, class_attr());
        }
    }
    let t = view.total();
    let mut push = |def: MetricDef, value: f64, own: Attributes| {
        out.push(Point {
            def,
            value,
            attributes: point_attributes(&identity, &own),
        });
    };
    let direction = |d: &str| vec![("network.io.direction", d.to_string())];
    if s.pcie_rx_mib_s.is_some() || s.pcie_tx_mib_s.is_some() {
        push(HW_GPU_IO, t.pcie_rx_bytes, direction("receive"));
        push(HW_GPU_IO, t.pcie_tx_bytes, direction("transmit"));
    }
    if s.nvlink_rx_mib_s.is_some() || s.nvlink_tx_mib_s.is_some() {
        push(NVLINK_IO, t.nvlink_rx_bytes, direction("receive"));
        push(NVLINK_IO, t.nvlink_tx_bytes, direction("transmit"));
    }
    for (i, (source, kind)) in ERROR_KINDS.into_iter().enumerate() {
        if view.error_counted(i) && t.errors[i] > 0.0 {
            let attrs = vec![
                ("error.type", kind.to_string()),
                ("gpuslack.error.source", source.to_string()),
            ];
            push(HW_ERRORS, t.errors[i], attrs);
        }
    }
}

/// `hw.errors`' kinds, in the order of [`COUNTED_ERRORS`]: (source, type).
const ERROR_KINDS: [(&str, &str); COUNTED_ERRORS.len()] = [
    ("ecc", "corrected"),
    ("ecc", "uncorrected"),
    ("pcie", "replay"),
    ("nvlink", "crc"),
    ("nvlink", "replay"),
    ("nvlink", "recovery"),
    ("driver", "xid"),
];

/// The counters of one GPU, one series per owner that held it (docs/EXPORT.md): each rises
/// only while its owner holds the GPU, and together they add up to the GPU's total.
fn counter_points(view: &GpuView, out: &mut Vec<Point>) {
    let s = &view.report.signals;
    let identity = identity_attributes(view);
    let pcie = s.pcie_rx_mib_s.is_some() || s.pcie_tx_mib_s.is_some();
    let nvlink = s.nvlink_rx_mib_s.is_some() || s.nvlink_tx_mib_s.is_some();
    for (owner, c) in view.owners() {
        let base: Attributes = identity.iter().chain(owner).cloned().collect();
        let mut push = |def: MetricDef, value: f64, own: Attributes| {
            out.push(Point {
                def,
                value,
                attributes: point_attributes(&base, &own),
            });
        };
        let direction = |d: &str| vec![("network.io.direction", d.to_string())];
        push(HW_ENERGY, c.energy_j, vec![]);
        if pcie {
            push(HW_GPU_IO, c.pcie_rx_bytes, direction("receive"));
            push(HW_GPU_IO, c.pcie_tx_bytes, direction("transmit"));
        }
        if nvlink {
            push(NVLINK_IO, c.nvlink_rx_bytes, direction("receive"));
            push(NVLINK_IO, c.nvlink_tx_bytes, direction("transmit"));
        }
        // Only where the counter is read at all: zero is a value, absence is not.
        for (i, (source, kind)) in ERROR_KINDS.into_iter().enumerate() {
            if view.error_counted(i) {
                let attrs = vec![
                    ("error.type", kind.to_string()),
                    ("gpuslack.error.source", source.to_string()),
                ];
                push(HW_ERRORS, c.errors[i], attrs);
            }
        }
        for class in Class::ALL {
            let spent = c.spent.get(&class).copied().unwrap_or_default();
            let class_attr = || vec![("gpuslack.diagnosis.class", class.as_str().to_string())];
            push(DIAGNOSIS_TIME, spent.seconds, class_attr());
            push(DIAGNOSIS_ENERGY, spent.energy_j, class_attr());
        }
    }
}

/// The GPU's health, where any health counter is read: `failed` when a row remap failed (the
/// GPU needs service), `degraded` when an uncorrected ECC error happened since the driver
/// loaded, a remap or retirement waits for a reset, an Xid event arrived since the agent
/// started, or the PCIe link trained below its maximum where it was last read
/// ([`crate::hw_health::link_shortfall`], every 10 s), else `ok`.
fn health_state(view: &GpuView) -> Option<&'static str> {
    let read = |m: Metric| view.held(m);
    let health = [
        Metric::EccVolatileUncorrected,
        Metric::RemapPending,
        Metric::RemapFailed,
        Metric::RetiredPending,
        Metric::XidEvents,
        Metric::PcieReplays,
        Metric::PcieLinkWidth,
    ];
    if health.iter().all(|m| read(*m).is_none()) {
        return None;
    }
    let positive = |m: Metric| read(m).is_some_and(|v| v > 0.0);
    if positive(Metric::RemapFailed) {
        Some("failed")
    } else if positive(Metric::EccVolatileUncorrected)
        || positive(Metric::RemapPending)
        || positive(Metric::RetiredPending)
        || positive(Metric::XidEvents)
        || view.link_shortfall().is_some()
    {
        Some("degraded")
    } else {
        Some("ok")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::DeviceFacts;
    use crate::diagnosis::{Diagnoser, Thresholds, WindowReport};
    use crate::export::state::ExportState;
    use crate::pipeline::Pipeline;
    use crate::sample::Sample;

    /// The reports of one GPU fed `samples` (10 Hz, 2 s windows, from t = 100 s), `add` filling
    /// each sample's readings.
    /// 28 jobs of one process each (`train`, PIDs 5000–5027), for the owner-churn tests.
    fn churning_jobs() -> Vec<std::sync::Arc<Vec<GpuProcess>>> {
        (0..28)
            .map(|k| {
                std::sync::Arc::new(vec![GpuProcess {
                    pid: 5000 + k,
                    name: Some("train".into()),
                    ..GpuProcess::default()
                }])
            })
            .collect()
    }

    fn reports(seconds: u32, add: impl Fn(f64, Sample) -> Sample) -> Vec<WindowReport> {
        let diagnoser = Diagnoser::new(Thresholds::default()).with_tdp_override(Some(700.0));
        let mut pipeline = Pipeline::new(2.0, diagnoser);
        let mut out = Vec::new();
        for i in 0..seconds * 10 {
            let t = 100.0 + f64::from(i) / 10.0;
            let sample = add(t, Sample::new(t, 0).with(Metric::PowerMw, 100_000.0));
            out.extend(pipeline.push(&sample).expect("in order"));
        }
        out.extend(pipeline.finish());
        out
    }

    fn value(points: &[Point], name: &str, attr: Option<(&str, &str)>) -> Option<f64> {
        points
            .iter()
            .find(|p| {
                p.def.name == name
                    && attr.is_none_or(|(k, v)| {
                        p.attributes.iter().any(|(pk, pv)| *pk == k && pv == v)
                    })
            })
            .map(|p| p.value)
    }

    #[test]
    fn energy_and_errors_count_from_the_agent_start_across_a_driver_reload() {
        // The counter starts at 5 MJ (joules since the driver loaded), rises 100 J/s, and the
        // driver reloads at t = 110 s (the counter restarts from 0). Volatile ECC counts 7
        // before the agent starts, then 2 more; the reload zeroes it and 1 follows.
        let reload = 110.0;
        let reports = reports(20, |t, s| {
            let energy_mj = if t < reload {
                5e9 + (t - 100.0) * 100_000.0
            } else {
                (t - reload) * 100_000.0
            };
            let ecc = if t < 105.0 {
                7.0
            } else if t < reload {
                9.0
            } else {
                1.0
            };
            s.with(Metric::EnergyMj, energy_mj)
                .with(Metric::EccVolatileUncorrected, ecc)
                .with(Metric::EccVolatileCorrected, 0.0)
        });
        let mut state = ExportState::default();
        let mut first = None;
        for r in &reports {
            state.update(r, &DeviceFacts::default());
            let points = points(state.get(0).expect("gpu 0"), 5);
            first.get_or_insert(value(&points, "hw.energy", None).expect("hw.energy"));
        }
        let view = state.get(0).expect("gpu 0");
        let points = points(view, 5);
        // 19.9 s of samples at 100 W, less the 0.1 s across the reload (its reading restarts
        // the count): never the 5 MJ the driver had counted before the agent started.
        let energy = value(&points, "hw.energy", None).expect("hw.energy");
        assert!((energy - 1980.0).abs() < 1.0, "{energy}");
        assert!(first.expect("first") < 200.0, "first point {first:?}");
        let errors =
            |kind| value(&points, "hw.errors", Some(("error.type", kind))).expect("hw.errors");
        assert_eq!((errors("uncorrected"), errors("corrected")), (3.0, 0.0));
        // The health state reads NVML's own count: uncorrected errors since the driver loaded.
        assert_eq!(
            value(&points, "hw.status", Some(("hw.state", "degraded"))),
            Some(1.0)
        );
        assert_eq!(
            value(&points, "hw.status", Some(("hw.state", "ok"))),
            Some(0.0)
        );
        // The cost of slack: every window's time is filed under its verdict.
        let seconds: f64 = points
            .iter()
            .filter(|p| p.def == DIAGNOSIS_TIME)
            .map(|p| p.value)
            .sum();
        assert_eq!(seconds, 2.0 * reports.len() as f64);
    }

    #[test]
    fn each_owner_counts_only_while_it_holds_the_gpu_and_the_owners_add_up() {
        // 100 J/s for 20 s; a job (one process, pid 4242) holds the GPU from t = 110 s.
        let job = std::sync::Arc::new(vec![GpuProcess {
            pid: 4242,
            name: Some("train".into()),
            ..GpuProcess::default()
        }]);
        let reports = reports(20, |t, s| {
            let mut s = s.with(Metric::EnergyMj, 5e9 + (t - 100.0) * 100_000.0);
            if t >= 110.0 {
                s.processes = Some(job.clone());
                s = s.with(Metric::Nprocs, 1.0);
            }
            s
        });
        let mut state = ExportState::default();
        for r in &reports {
            state.update(r, &DeviceFacts::default());
        }
        let view = state.get(0).expect("gpu 0");
        let all = points(view, 5);
        let energy: Vec<&Point> = all.iter().filter(|p| p.def == HW_ENERGY).collect();
        assert_eq!(energy.len(), 2, "one series per owner: {energy:?}");
        let of = |pid: Option<&str>| {
            energy
                .iter()
                .find(|p| {
                    p.attributes
                        .iter()
                        .find(|(k, _)| *k == "process.pid")
                        .map(|(_, v)| v.as_str())
                        == pid
                })
                .map(|p| p.value)
                .expect("series")
        };
        let (before, during) = (of(None), of(Some("4242")));
        // Before the job: 10 s at 100 W; during it: the rest. Never the whole again.
        assert!((before - 1000.0).abs() < 15.0, "{before}");
        assert!((during - 990.0).abs() < 15.0, "{during}");
        assert!((before + during - view.energy_j()).abs() < 1e-6);
    }

    #[test]
    fn pods_on_the_series_keep_one_series_a_metric_whatever_the_pod_churn() {
        use crate::export::selection::{MetricSet, Selection};
        use crate::sample::PodContainer;
        // 28 pods, one after another, each assigned the GPU and running its job for 4 s.
        let jobs = churning_jobs();
        let pods: Vec<Arc<Vec<PodContainer>>> = (0..28)
            .map(|k| {
                Arc::new(vec![PodContainer {
                    pod: format!("train-{k}"),
                    namespace: "ml".into(),
                    container: "main".into(),
                }])
            })
            .collect();
        let reports = reports(28 * 4, |t, s| {
            let k = (((t - 100.0) / 4.0).floor() as usize).min(27);
            let mut s = s
                .with(Metric::UtilGpu, 100.0)
                .with(Metric::SmMhz, 1980.0)
                .with(Metric::TempC, 60.0)
                .with(Metric::Nprocs, 1.0);
            s.processes = Some(jobs[k].clone());
            s.pods = Some(pods[k].clone());
            s
        });
        for selection in [
            Selection::new(MetricSet::Dcgm, &[], &[]).expect("dcgm"),
            Selection::new(MetricSet::Lean, &[], &[])
                .expect("lean")
                .with_pod_labels(true),
        ] {
            let set = selection.set().name();
            let mut state = ExportState::default().with_selection(selection);
            let mut most = 0;
            for r in &reports {
                state.update(r, &DeviceFacts::default());
                let points = state.points();
                most = most.max(points.len());
                let pod = pods
                    .iter()
                    .position(|p| Some(p) == r.stats.pods.as_ref())
                    .map(|k| format!("train-{k}"));
                let mut gauges = std::collections::BTreeMap::new();
                for p in points.iter().filter(|p| p.def.kind != Kind::Counter) {
                    // A gauge names the current pod, never a former one, under its set's key.
                    let named = p
                        .attributes
                        .iter()
                        .find(|(k, _)| *k == "pod" || *k == "k8s.pod.name")
                        .map(|(_, v)| v.clone());
                    assert_eq!(named, pod, "{set}: {}", p.def.name);
                    let key: Vec<&(&str, String)> = p
                        .attributes
                        .iter()
                        .filter(|(k, _)| !matches!(*k, "pod" | "k8s.pod.name"))
                        .collect();
                    *gauges.entry(format!("{}{key:?}", p.def.name)).or_insert(0) += 1;
                }
                // One series a gauge and label set: the pod replaces, never adds.
                assert!(gauges.values().all(|n| *n == 1), "{set}: {gauges:?}");
            }
            // The set's bound (docs/EXPORT.md, "What it costs") whatever the churn.
            let bound = if set == "dcgm" { 72 } else { 45 };
            assert!(most <= bound, "{set}: {most} series");
            assert!(most >= 8, "{set}: {most} series");
        }
    }

    #[test]
    fn churned_owners_fold_into_other_their_series_end_and_the_sums_still_add_up() {
        // 28 jobs, one after another, each holding the GPU for 4 s (two windows) at 100 W.
        let jobs = churning_jobs();
        let reports = reports(28 * 4, |t, s| {
            let k = ((t - 100.0) / 4.0).floor() as usize;
            let mut s = s.with(Metric::EnergyMj, 5e9 + (t - 100.0) * 100_000.0);
            s.processes = Some(jobs[k.min(27)].clone());
            s.with(Metric::Nprocs, 1.0)
        });
        let mut state = ExportState::default()
            .with_owner_series(4)
            .with_selection(crate::export::selection::Selection::full());
        let mut series_seen = Vec::new();
        for r in &reports {
            state.update(r, &DeviceFacts::default());
            let view = state.get(0).expect("gpu 0");
            let energy = points(view, 5)
                .into_iter()
                .filter(|p| p.def == HW_ENERGY)
                .count();
            series_seen.push(energy);
        }
        let view = state.get(0).expect("gpu 0");
        let all = points(view, 5);
        let energy: Vec<&Point> = all.iter().filter(|p| p.def == HW_ENERGY).collect();
        // Four owners of their own and `other`, whatever the churn; never more along the way.
        assert_eq!(energy.len(), 5, "{energy:?}");
        assert!(series_seen.iter().all(|n| *n <= 5), "{series_seen:?}");
        let pid_of = |p: &Point| {
            p.attributes
                .iter()
                .find(|(k, _)| *k == "process.pid")
                .map(|(_, v)| v.clone())
        };
        let pids: Vec<Option<String>> = energy.iter().map(|p| pid_of(p)).collect();
        // The current job (pid 5027) keeps its series; the first job's ended long ago.
        assert!(pids.contains(&Some("5027".into())), "{pids:?}");
        assert!(!pids.contains(&Some("5000".into())), "{pids:?}");
        let other: Vec<&&Point> = energy
            .iter()
            .filter(|p| {
                p.attributes
                    .iter()
                    .any(|(k, v)| *k == "gpuslack.owner" && v == "other")
            })
            .collect();
        assert_eq!(other.len(), 1);
        let sum: f64 = energy.iter().map(|p| p.value).sum();
        assert!(
            (sum - view.energy_j()).abs() < 1e-6,
            "{sum} vs {}",
            view.energy_j()
        );
        // The cost of slack adds up the same way: GPU time per verdict over the owners is the
        // GPU's time.
        let time: f64 = all
            .iter()
            .filter(|p| p.def == DIAGNOSIS_TIME)
            .map(|p| p.value)
            .sum();
        let windows: f64 = reports.iter().map(|r| r.stats.duration_s()).sum();
        assert!((time - windows).abs() < 1e-6, "{time} vs {windows}");
    }

    /// What a backend holds after 28 jobs, one after another, each holding the GPU for 4 s (two
    /// windows) at 100 W, busy then idle, in the lean set, collected every `collect_every`
    /// windows and at the end: the last value of every series it saw (name and attributes),
    /// the series of each collection, and the export state.
    struct Backend {
        last: std::collections::BTreeMap<String, f64>,
        per_collection: Vec<usize>,
        state: ExportState,
        windows_s: f64,
    }

    fn churn_in_lean(collect_every: usize) -> Backend {
        let jobs = churning_jobs();
        let reports = reports(28 * 4, |t, s| {
            let k = ((t - 100.0) / 4.0).floor() as usize;
            let busy = (t - 100.0) % 4.0 < 2.0;
            let mut s = s
                .with(Metric::EnergyMj, 5e9 + (t - 100.0) * 100_000.0)
                .with(Metric::UtilGpu, if busy { 100.0 } else { 0.0 })
                .with(Metric::GpmSm, if busy { 90.0 } else { 0.0 })
                .with(Metric::EccVolatileCorrected, 0.0)
                .with(Metric::XidEvents, 0.0)
                .with(Metric::XidLast, 0.0);
            s.processes = Some(jobs[k.min(27)].clone());
            s.with(Metric::Nprocs, 1.0)
        });
        let lean = crate::export::selection::Selection::new(
            crate::export::selection::MetricSet::Lean,
            &[],
            &[],
        )
        .expect("lean");
        let mut state = ExportState::default().with_selection(lean);
        let mut last = std::collections::BTreeMap::new();
        let mut per_collection = Vec::new();
        let mut collect = |state: &ExportState| {
            let points = state.points();
            per_collection.push(points.len());
            for p in points.iter() {
                last.insert(format!("{}{:?}", p.def.name, p.attributes), p.value);
            }
        };
        for (i, r) in reports.iter().enumerate() {
            state.update(r, &DeviceFacts::default());
            if i % collect_every == collect_every - 1 {
                collect(&state);
            }
        }
        collect(&state);
        Backend {
            last,
            per_collection,
            state,
            windows_s: reports.iter().map(|r| r.stats.duration_s()).sum(),
        }
    }

    impl Backend {
        fn sum(&self, name: &str) -> f64 {
            self.last
                .iter()
                .filter(|(k, _)| k.starts_with(&format!("{name}[")))
                .map(|(_, v)| v)
                .sum()
        }
    }

    #[test]
    fn lean_one_series_for_the_verdict_and_no_zero_that_never_moved() {
        let backend = churn_in_lean(1);
        let all = backend.state.points();
        let of = |def: MetricDef| all.iter().filter(|p| p.def == def).count();
        assert_eq!(of(DIAGNOSIS), 1, "the current verdict only");
        assert_eq!(of(HW_STATUS), 1, "the current health state only");
        assert_eq!(of(ECC_ERRORS), 0, "read, never above zero");
        assert_eq!(of(XID_LAST), 0);
        assert_eq!(of(HW_ERRORS), 0, "no error kind ever counted one");
        assert_eq!(of(THROTTLE), 0, "no clock-event reason was ever seen");
        assert_eq!(of(DIAGNOSIS_ENERGY), 0, "not in the lean set");
        let d = all.iter().find(|p| p.def == DIAGNOSIS).expect("verdict");
        assert_eq!(d.value, 1.0);
        assert!(attr_of(d, "gpuslack.diagnosis.confidence").is_some());
    }

    #[test]
    fn lean_former_owners_end_once_collected_and_the_sums_add_up() {
        // A collection every window: a former owner's series end at the next window.
        let backend = churn_in_lean(1);
        let energy = backend
            .state
            .points()
            .iter()
            .filter(|p| p.def == HW_ENERGY)
            .count();
        assert!(energy <= 2, "{energy}");
        let max = backend.per_collection.iter().max().copied().unwrap_or(0);
        assert!(max <= 30, "{:?}", backend.per_collection);
        // The backend's last value of each series adds up to the GPU's time and energy: every
        // job's series kept what it counted, and none was counted twice.
        let time = backend.sum("gpuslack.diagnosis.time");
        assert!(
            (time - backend.windows_s).abs() < 1e-6,
            "{time} vs {}",
            backend.windows_s
        );
        let view = backend.state.get(0).expect("gpu 0");
        let joules = backend.sum("hw.energy");
        assert!(
            (joules - view.energy_j()).abs() < 1e-6,
            "{joules} vs {}",
            view.energy_j()
        );
        // Each of the 28 jobs has time series of its own: none was folded away.
        let jobs: std::collections::BTreeSet<&str> = backend
            .last
            .keys()
            .filter(|k| k.starts_with("gpuslack.diagnosis.time["))
            .filter_map(|k| k.split("(\"process.pid\", \"").nth(1))
            .filter_map(|rest| rest.split('"').next())
            .collect();
        assert_eq!(jobs.len(), 28, "{jobs:?}");
    }

    #[test]
    fn lean_owners_no_export_carried_fold_into_the_owner_less_series_once() {
        // A collection every 8 windows (16 s): four jobs come and go between two of them.
        let backend = churn_in_lean(8);
        let view = backend.state.get(0).expect("gpu 0");
        // Never more than the current owner, one former one and the owner-less series.
        assert!(view.owners().count() <= 3, "{}", view.owners().count());
        let max = backend.per_collection.iter().max().copied().unwrap_or(0);
        assert!(max <= 30, "{:?}", backend.per_collection);
        // Still every GPU-second and joule once: what was folded no export had carried.
        let time = backend.sum("gpuslack.diagnosis.time");
        assert!(
            (time - backend.windows_s).abs() < 1e-6,
            "{time} vs {}",
            backend.windows_s
        );
        let joules = backend.sum("hw.energy");
        assert!(
            (joules - view.energy_j()).abs() < 1e-6,
            "{joules} vs {}",
            view.energy_j()
        );
        // Some jobs went whole into the owner-less series, none of them twice.
        let owner_less = backend
            .last
            .keys()
            .filter(|k| k.starts_with("gpuslack.diagnosis.time[") && !k.contains("process.pid"))
            .count();
        assert!(
            owner_less >= 1,
            "{:?}",
            backend.last.keys().collect::<Vec<_>>()
        );
    }

    #[test]
    fn a_verdict_change_is_announced_once_it_has_held() {
        // Busy (GPU-Util 100%, SM 90%) for 10 s, one idle window, busy again, then idle.
        let reports = reports(30, |t, s| {
            let busy = !(110.0..112.0).contains(&t) && t < 120.0;
            let (util, sm) = if busy { (100.0, 90.0) } else { (0.0, 0.0) };
            s.with(Metric::UtilGpu, util)
                .with(Metric::GpmSm, sm)
                .with(Metric::GpmTensor, sm)
                .with(Metric::GpmDram, 10.0)
                .with(Metric::Nprocs, 1.0)
                .with(Metric::PowerMw, if busy { 650_000.0 } else { 120_000.0 })
        });
        let mut state = ExportState::default();
        let changes: Vec<_> = reports
            .iter()
            .filter_map(|r| state.update(r, &DeviceFacts::default()))
            .collect();
        let classes: Vec<Class> = reports.iter().map(|r| r.class).collect();
        // The lone idle window is no announcement; the lasting one is, once, 3 windows in.
        assert_eq!(changes.len(), 2, "{changes:?} for {classes:?}");
        assert_eq!(changes[0].from, None);
        assert_eq!(changes[1].from, Some(changes[0].to));
        assert_ne!(changes[1].to, changes[0].to);
    }

    /// The rank of a Slurm job under Kubernetes, with every identity the environment can give.
    fn rank_everything() -> GpuProcess {
        GpuProcess {
            pid: 4242,
            name: Some("pt_main_thread".into()),
            user: Some("alice".into()),
            gpu_mem_bytes: Some(1e9),
            sm_pct: Some(50.0),
            cpu_pct: Some(100.0),
            thread_pct: Some(99.0),
            pgid: Some(4200),
            container_id: Some("3f4c2e1b9a8d7c6b5a4f".into()),
            pod_uid: Some("0b6b-uid".into()),
            slurm_job: Some("4711".into()),
            identity: crate::sample::JobIdentity {
                rank: Some(37),
                local_rank: Some(5),
                world_size: Some(64),
                job_key: Some("node-a:29500".into()),
                slurm_step: Some("0".into()),
                slurm_array_task: Some("3".into()),
                slurm_user: Some("alice".into()),
                slurm_account: Some("vision".into()),
                slurm_partition: Some("h200".into()),
            },
            profiler: None,
        }
    }

    #[test]
    fn the_job_info_names_the_rank_and_a_dead_rank_leaves_its_gpu_allocated_idle() {
        let rank = Arc::new(vec![rank_everything()]);
        let pods = Arc::new(vec![crate::sample::PodContainer {
            pod: "trainer-5".into(),
            namespace: "vision".into(),
            container: "trainer".into(),
        }]);
        // The rank holds the GPU for 10 s, then dies; the kubelet keeps the GPU assigned.
        let reports = reports(20, |t, mut s| {
            s.pods = Some(pods.clone());
            s.processes = Some(if t < 110.0 {
                rank.clone()
            } else {
                Arc::new(vec![])
            });
            s
        });
        let mut state = ExportState::default();
        let mut infos = Vec::new();
        for r in &reports {
            state.update(r, &DeviceFacts::default());
            let view = state.get(0).expect("gpu 0");
            let info: Vec<Point> = points(view, 5)
                .into_iter()
                .filter(|p| p.def == JOB_INFO)
                .collect();
            assert_eq!(info.len(), 1, "one job info point per GPU");
            infos.push(info[0].clone());
        }
        let attr = |p: &Point, k: &str| {
            p.attributes
                .iter()
                .find(|(pk, _)| *pk == k)
                .map(|(_, v)| v.clone())
        };
        let first = &infos[0];
        for (k, v) in [
            // Slurm first: its job id is the same on every node.
            ("gpuslack.job.id", "slurm:4711"),
            ("gpuslack.job.rank", "37"),
            ("gpuslack.job.world_size", "64"),
            ("slurm.job.id", "4711"),
            ("slurm.job.account", "vision"),
            ("k8s.namespace.name", "vision"),
            ("gpuslack.job.state", "running"),
            ("hw.id", "gpu-0"),
        ] {
            assert_eq!(attr(first, k).as_deref(), Some(v), "{k}");
        }
        let last = infos.last().expect("a last window");
        assert_eq!(
            attr(last, "gpuslack.job.state").as_deref(),
            Some("allocated_idle")
        );
        // The dead rank's job and rank stay on its empty GPU: the rank-died case, named.
        assert_eq!(attr(last, "gpuslack.job.id").as_deref(), Some("slurm:4711"));
        assert_eq!(attr(last, "gpuslack.job.rank").as_deref(), Some("37"));
    }

    #[test]
    fn no_point_carries_more_than_20_attributes_at_the_worst_case() {
        // A MIG instance with every fact, one process with every identity, in a pod the
        // kubelet assigned it to, and every metric sampled: the most labels any point gets.
        let rank = Arc::new(vec![rank_everything()]);
        let pods = Arc::new(vec![crate::sample::PodContainer {
            pod: "trainer-5".into(),
            namespace: "vision".into(),
            container: "trainer".into(),
        }]);
        let reports = reports(10, |t, mut s| {
            for m in Metric::ALL {
                s.set(m, 1.0);
            }
            s.set(Metric::EnergyMj, 5e9 + t * 1e5);
            s.clk_reasons = Some(0x4);
            s.pods = Some(pods.clone());
            s.processes = Some(rank.clone());
            s
        });
        let facts = DeviceFacts {
            name: Some("NVIDIA H200 MIG 1g.18gb".into()),
            uuid: Some("MIG-5c8f".into()),
            driver: Some("580.95.05".into()),
            mig_parent: Some(0),
            power_limit_w: Some(700.0),
            ..DeviceFacts::default()
        };
        let mut state = ExportState::default().with_owner_series(1);
        for r in &reports {
            state.update(r, &facts);
        }
        let all = points(state.get(0).expect("gpu 0"), 5);
        let widest = all
            .iter()
            .max_by_key(|p| p.attributes.len())
            .expect("points");
        // /metrics adds otel_scope_name and otel_scope_version: 22, within Prometheus' and
        // most backends' limits; OTLP carries the scope beside the attributes.
        assert!(
            widest.attributes.len() <= 20,
            "{} carries {}: {:?}",
            widest.def.name,
            widest.attributes.len(),
            widest.attributes
        );
        assert!(all.iter().any(|p| p.def == JOB_INFO));
    }

    use crate::export::point::OWNER_KEYS;

    fn attr_of(p: &Point, key: &str) -> Option<String> {
        p.attributes
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.clone())
    }

    #[test]
    fn an_owner_change_starts_no_gauge_series_and_the_owner_rides_on_counters_and_job_info() {
        // A Slurm rank in pod trainer-5 holds the GPU for 10 s; then an evaluation process of
        // another job, in pod eval-1, does. Every metric is sampled.
        let rank = Arc::new(vec![rank_everything()]);
        let eval = Arc::new(vec![GpuProcess {
            pid: 7000,
            name: Some("eval".into()),
            pgid: Some(7000),
            sm_pct: Some(30.0),
            ..GpuProcess::default()
        }]);
        let pod = |name: &str| {
            Arc::new(vec![crate::sample::PodContainer {
                pod: name.into(),
                namespace: "vision".into(),
                container: "main".into(),
            }])
        };
        let (trainer, evaluator) = (pod("trainer-5"), pod("eval-1"));
        let change = 110.0;
        let reports = reports(20, |t, mut s| {
            for m in Metric::ALL {
                s.set(m, 1.0);
            }
            s.set(Metric::EnergyMj, 5e9 + t * 1e5);
            s.clk_reasons = Some(0x4);
            let first = t < change;
            s.processes = Some(if first { rank.clone() } else { eval.clone() });
            s.pods = Some(if first {
                trainer.clone()
            } else {
                evaluator.clone()
            });
            s
        });
        let mut state =
            ExportState::default().with_owner_series(crate::export::state::DEFAULT_OWNER_SERIES);
        let mut before = None;
        for r in &reports {
            state.update(r, &DeviceFacts::default());
            if r.stats.end <= change {
                before = Some(points(state.get(0).expect("gpu 0"), 5));
            }
        }
        let before = before.expect("a window before the change");
        let after = points(state.get(0).expect("gpu 0"), 5);
        // The GPU-level gauges: everything but the counters, the process and assignment points
        // (a process's and a pod's own series) and the job info.
        let per_owner = [
            PROCESS_SM,
            PROCESS_MEMORY,
            PROCESS_CPU,
            POD_ASSIGNMENT,
            JOB_INFO,
        ];
        let gauges = |points: &[Point]| -> std::collections::BTreeSet<String> {
            points
                .iter()
                .filter(|p| p.def.kind != Kind::Counter && !per_owner.contains(&p.def))
                .map(|p| format!("{}{:?}", p.def.name, p.attributes))
                .collect()
        };
        let (g_before, g_after) = (gauges(&before), gauges(&after));
        // Power, utilisation ×3, memory ×4, temperatures ×3, health ×3, SM, occupancy,
        // pipes ×3, DRAM, clocks ×2, efficiency ×3, verdicts ×9, ECC ×4, remaps ×4, pages ×3,
        // Xid…: the same series, one by one, whoever holds the GPU.
        assert!(
            g_before.len() >= 50,
            "{} gauges: {g_before:?}",
            g_before.len()
        );
        assert_eq!(g_before, g_after, "an owner change renamed a gauge");
        for p in after.iter().filter(|p| !per_owner.contains(&p.def)) {
            if p.def.kind == Kind::Counter {
                continue;
            }
            for key in OWNER_KEYS {
                assert_eq!(attr_of(p, key), None, "{} names its owner", p.def.name);
            }
        }
        // The counters keep each owner's series: the rank's and the evaluator's energy.
        let energy_of = |pid: &str| {
            after
                .iter()
                .find(|p| p.def == HW_ENERGY && attr_of(p, "process.pid").as_deref() == Some(pid))
                .unwrap_or_else(|| panic!("no hw.energy of pid {pid}"))
        };
        assert_eq!(
            attr_of(energy_of("4242"), "gpuslack.job.id").as_deref(),
            Some("slurm:4711")
        );
        let evaluator_energy = energy_of("7000");
        assert_eq!(
            attr_of(evaluator_energy, "gpuslack.job.id").as_deref(),
            Some("pgid:7000")
        );
        assert_eq!(
            attr_of(evaluator_energy, "k8s.pod.name").as_deref(),
            Some("eval-1")
        );
        let jobs_timed: std::collections::BTreeSet<String> = after
            .iter()
            .filter(|p| p.def == DIAGNOSIS_TIME)
            .filter_map(|p| attr_of(p, "gpuslack.job.id"))
            .collect();
        assert_eq!(
            jobs_timed,
            ["pgid:7000", "slurm:4711"].map(String::from).into()
        );
        // The job info names who holds the GPU now, before and after.
        let info = |points: &[Point]| -> Point {
            let infos: Vec<&Point> = points.iter().filter(|p| p.def == JOB_INFO).collect();
            assert_eq!(infos.len(), 1, "one job info a GPU: {infos:?}");
            infos[0].clone()
        };
        let (i_before, i_after) = (info(&before), info(&after));
        for (k, v) in [
            ("gpuslack.job.id", "slurm:4711"),
            ("process.pid", "4242"),
            ("process.executable.name", "pt_main_thread"),
            ("container.id", "3f4c2e1b9a8d7c6b5a4f"),
            ("k8s.pod.name", "trainer-5"),
            ("k8s.container.name", "main"),
            ("gpuslack.job.rank", "37"),
        ] {
            assert_eq!(attr_of(&i_before, k).as_deref(), Some(v), "{k} before");
        }
        for (k, v) in [
            ("gpuslack.job.id", "pgid:7000"),
            ("process.pid", "7000"),
            ("process.executable.name", "eval"),
            ("k8s.pod.name", "eval-1"),
            ("hw.id", "gpu-0"),
        ] {
            assert_eq!(attr_of(&i_after, k).as_deref(), Some(v), "{k} after");
        }
        assert_eq!(attr_of(&i_after, "container.id"), None);
        assert_eq!(attr_of(&i_after, "gpuslack.job.rank"), None);
        // A process series names its process and the owner's job.
        let eval_sm = after
            .iter()
            .find(|p| p.def == PROCESS_SM)
            .expect("the evaluator's SM share");
        assert_eq!(attr_of(eval_sm, "process.pid").as_deref(), Some("7000"));
        assert_eq!(
            attr_of(eval_sm, "gpuslack.job.id").as_deref(),
            Some("pgid:7000")
        );
        assert_eq!(eval_sm.value, 0.3);
    }

    #[test]
    fn the_dcgm_exporter_fields_are_exported_with_their_bounds_and_units() {
        // An H200 at gen5 x16 whose link fell to gen3 under load at t = 104 s, 70% memory
        // controller, GPM graphics engine 80%, FP64 12%, P0, 2 GiB of 256 GiB BAR1, fans at 40%,
        // 17 NVLinks up and 1 down.
        // Link 3 has 4 replays, link 17 is down; read once, at the first sample (every 10 s).
        let links: Arc<Vec<crate::sample::NvlinkLink>> = Arc::new(
            (0..18)
                .map(|link| crate::sample::NvlinkLink {
                    link,
                    up: link != 17,
                    crc: Some(0),
                    replay: Some(if link == 3 { 4 } else { 0 }),
                    recovery: Some(0),
                })
                .collect(),
        );
        let reports = reports(10, |t, mut s| {
            if t == 100.0 {
                s.nvlinks = Some(links.clone());
            }
            // The link read every 4 s here (every 10 s live): gen5, then gen3 from 104 s.
            let tenths = ((t - 100.0) * 10.0).round() as u32;
            if tenths.is_multiple_of(40) {
                s = s
                    .with(Metric::PcieLinkGen, if t < 104.0 { 5.0 } else { 3.0 })
                    .with(Metric::PcieLinkWidth, 16.0)
                    .with(Metric::PcieLinkGenMax, 5.0)
                    .with(Metric::PcieLinkWidthMax, 16.0);
            }
            s.with(Metric::UtilGpu, 100.0)
                .with(Metric::UtilMem, 70.0)
                .with(Metric::GpmGr, 80.0)
                .with(Metric::GpmFp64, 12.0)
                .with(Metric::Pstate, 0.0)
                .with(Metric::Bar1UsedBytes, 2.0 * 1024.0 * 1024.0 * 1024.0)
                .with(Metric::Bar1TotalBytes, 256.0 * 1024.0 * 1024.0 * 1024.0)
                .with(Metric::FanPct, 40.0)
                .with(Metric::NvlinkLinksUp, 17.0)
                .with(Metric::NvlinkLinksDown, 1.0)
                .with(Metric::PcieReplays, 0.0)
        });
        let facts = DeviceFacts {
            uuid: Some("GPU-5c8f".into()),
            driver: Some("580.159.04".into()),
            pci_bus_id: Some("00000000:1B:00.0".into()),
            serial: Some("1654123456789".into()),
            vbios: Some("96.00.9F.00.01".into()),
            ..DeviceFacts::default()
        };
        let mut state = ExportState::default();
        let mut states = Vec::new();
        for r in &reports {
            state.update(r, &facts);
            let all = points(state.get(0).expect("gpu 0"), 5);
            states.push(value(&all, "hw.status", Some(("hw.state", "degraded"))));
        }
        let all = points(state.get(0).expect("gpu 0"), 5);
        let v = |name, attr| value(&all, name, attr);
        assert_eq!(v("gpuslack.gr_engine.activity", None), Some(0.8));
        assert_eq!(v("gpuslack.memory_controller.utilization", None), Some(0.7));
        assert_eq!(
            v("gpuslack.pipe.activity", Some(("gpuslack.pipe", "fp64"))),
            Some(0.12)
        );
        assert_eq!(v("gpuslack.performance_state", None), Some(0.0));
        assert_eq!(v("gpuslack.bar1.usage", None), Some(2147483648.0));
        assert_eq!(v("gpuslack.bar1.limit", None), Some(274877906944.0));
        let bound = |b| Some(("gpuslack.pcie.link.bound", b));
        assert_eq!(
            v("gpuslack.pcie.link.generation", bound("current")),
            Some(3.0)
        );
        assert_eq!(v("gpuslack.pcie.link.generation", bound("max")), Some(5.0));
        assert_eq!(v("gpuslack.pcie.link.width", bound("current")), Some(16.0));
        assert_eq!(v("gpuslack.pcie.link.width", bound("max")), Some(16.0));
        assert_eq!(v("gpuslack.fan.speed", None), Some(0.4));
        let state_of = |s| Some(("gpuslack.nvlink.state", s));
        assert_eq!(v("gpuslack.nvlink.links", state_of("up")), Some(17.0));
        assert_eq!(v("gpuslack.nvlink.links", state_of("down")), Some(1.0));
        // Per link, only the erring and the down one, held across the windows between reads.
        let per_link: Vec<(String, String, f64)> = all
            .iter()
            .filter(|p| p.def == NVLINK_LINK_ERRORS)
            .map(|p| {
                let get = |k: &str| {
                    p.attributes
                        .iter()
                        .find(|(pk, _)| *pk == k)
                        .map(|(_, v)| v.clone())
                        .unwrap_or_default()
                };
                (get("gpuslack.nvlink.link"), get("error.type"), p.value)
            })
            .collect();
        let expect = |link: &str, kind: &str, n: f64| (link.to_string(), kind.to_string(), n);
        assert_eq!(
            per_link,
            vec![
                expect("3", "crc", 0.0),
                expect("3", "replay", 4.0),
                expect("3", "recovery", 0.0),
                expect("17", "crc", 0.0),
                expect("17", "replay", 0.0),
                expect("17", "recovery", 0.0),
            ]
        );
        // The windows at gen5 are healthy; once the loaded link reads gen3, degraded, and it
        // stays so in the window between two reads (106–108 s), not flapping back to ok.
        assert_eq!(
            states,
            vec![Some(0.0), Some(0.0), Some(1.0), Some(1.0), Some(1.0)]
        );
        // The board's identity rides on one info point only.
        let info: Vec<&Point> = all.iter().filter(|p| p.def == GPU_INFO).collect();
        assert_eq!(info.len(), 1);
        let attr = |k: &str| {
            info[0]
                .attributes
                .iter()
                .find(|(pk, _)| *pk == k)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(attr("hw.id"), Some("GPU-5c8f"));
        assert_eq!(attr("hw.driver_version"), Some("580.159.04"));
        assert_eq!(attr("hw.firmware_version"), Some("96.00.9F.00.01"));
        assert_eq!(attr("hw.serial_number"), Some("1654123456789"));
        assert_eq!(attr("gpuslack.gpu.pci_bus_id"), Some("00000000:1B:00.0"));
        let elsewhere = all
            .iter()
            .filter(|p| p.def != GPU_INFO)
            .filter(|p| p.attributes.iter().any(|(k, _)| *k == "hw.serial_number"))
            .count();
        assert_eq!(elsewhere, 0, "the serial is on the info point only");
    }

    #[test]
    fn xid_events_are_counted_by_code_and_the_codes_are_bounded() {
        // One Xid a window (2 s) from t = 102 s: codes 13, 13, 79, then 9 other codes.
        let codes = [
            13.0, 13.0, 79.0, 31.0, 43.0, 45.0, 48.0, 62.0, 64.0, 94.0, 95.0, 119.0,
        ];
        let reports = reports(2 * (codes.len() as u32 + 1), |t, s| {
            let n = (((t - 100.0) / 2.0).floor() as usize).min(codes.len());
            let last = if n == 0 { 0.0 } else { codes[n - 1] };
            s.with(Metric::XidEvents, n as f64)
                .with(Metric::XidLast, last)
        });
        let mut state = ExportState::default();
        for r in &reports {
            state.update(r, &DeviceFacts::default());
        }
        let all = points(state.get(0).expect("gpu 0"), 5);
        let xid: Vec<&Point> = all.iter().filter(|p| p.def == XID_ERRORS).collect();
        let by_code = |code: &str| {
            xid.iter()
                .find(|p| {
                    p.attributes
                        .iter()
                        .any(|(k, v)| *k == "gpuslack.xid.code" && v == code)
                })
                .map(|p| {
                    let action = p
                        .attributes
                        .iter()
                        .find(|(k, _)| *k == "gpuslack.xid.action")
                        .map(|(_, v)| v.clone());
                    (p.value, action)
                })
        };
        assert_eq!(by_code("13"), Some((2.0, Some("restart_app".into()))));
        assert_eq!(by_code("79"), Some((1.0, Some("reboot_node".into()))));
        // 8 codes of their own at most, then `other`; the total is every event.
        assert!(xid.len() <= MAX_XID_CODES_FOR_TEST + 1, "{}", xid.len());
        let total: f64 = xid.iter().map(|p| p.value).sum();
        assert_eq!(total, codes.len() as f64);
        assert!(by_code("other").is_some(), "{xid:?}");
        // No owner on an Xid series: the GPU's identity only.
        assert!(xid
            .iter()
            .all(|p| p.attributes.iter().all(|(k, _)| !k.starts_with("process."))));
        // The per-owner total is unchanged beside it.
        assert_eq!(
            value(&all, "hw.errors", Some(("error.type", "xid"))),
            Some(codes.len() as f64)
        );
    }

    const MAX_XID_CODES_FOR_TEST: usize = crate::export::state::MAX_XID_CODES;

    #[test]
    fn a_mig_instance_names_its_profile() {
        assert_eq!(mig_profile("NVIDIA H200 MIG 1g.18gb"), Some("1g.18gb"));
        assert_eq!(
            mig_profile("NVIDIA A100-SXM4-40GB MIG 3g.20gb"),
            Some("3g.20gb")
        );
        assert_eq!(mig_profile("NVIDIA H200"), None);
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
