//! Every exported metric: its name, unit, kind and attributes (the table; the values come out
//! of a GPU's view in [`super::points`]). Names follow the OpenTelemetry semantic conventions (v1.42.0, the release of
//! `opentelemetry-semantic-conventions` 0.33) wherever they define the metric (`hw.*`); every
//! metric of gpuslack's own is under `gpuslack.*`, as the naming guide asks, so that none
//! collides with a vendor's (Datadog's `gpu` check emits `gpu.temperature`, `gpu.power.usage`…).
//! OTLP and Prometheus both read this one table; docs/EXPORT.md lists it for people.

/// The instrumentation scope of every metric and record, in OTLP (with the version and schema
/// URL) and on `/metrics` (the `otel_scope_name` label).
pub const SCOPE_NAME: &str = "gpuslack";

/// Attributes the semantic conventions type as integers, sent as such over OTLP (on `/metrics`
/// every label is text).
pub const INT_ATTRIBUTES: &[&str] = &["process.pid"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Gauge,
    /// Monotonic sum.
    Counter,
    /// Non-monotonic sum (the semantic conventions' UpDownCounter): a quantity of something,
    /// such as memory in use, that sums across GPUs.
    UpDownCounter,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetricDef {
    pub name: &'static str,
    pub unit: &'static str,
    pub kind: Kind,
    pub description: &'static str,
    /// Sent as an integer over OTLP: counts and bytes, as the semantic conventions type them
    /// (`hw.errors`, `hw.gpu.io`, `hw.gpu.memory.*`, `hw.status`). The value is rounded.
    pub int: bool,
}

impl MetricDef {
    /// The same metric, sent as an integer.
    const fn int(self) -> MetricDef {
        MetricDef { int: true, ..self }
    }
}

const fn def(
    name: &'static str,
    unit: &'static str,
    kind: Kind,
    description: &'static str,
) -> MetricDef {
    MetricDef {
        name,
        unit,
        kind,
        description,
        int: false,
    }
}

const fn gauge(name: &'static str, unit: &'static str, description: &'static str) -> MetricDef {
    def(name, unit, Kind::Gauge, description)
}

const fn counter(name: &'static str, unit: &'static str, description: &'static str) -> MetricDef {
    def(name, unit, Kind::Counter, description)
}

pub const HW_POWER: MetricDef = gauge(
    "hw.power",
    "W",
    "Mean power of the GPU over the last window (from the energy counter where sampled)",
);
pub const HW_ENERGY: MetricDef = counter(
    "hw.energy",
    "J",
    "Energy used by the GPU since the agent started (NVML's counter followed across driver reloads)",
);
pub const HW_GPU_UTILIZATION: MetricDef = gauge(
    "hw.gpu.utilization",
    "1",
    "Share of time each engine was busy (hw.gpu.task: general = GPU-Util, not a measure of work; encoder; decoder)",
);
pub const HW_GPU_MEMORY_USAGE: MetricDef = def(
    "hw.gpu.memory.usage",
    "By",
    Kind::UpDownCounter,
    "Device memory in use",
)
.int();
pub const HW_GPU_MEMORY_LIMIT: MetricDef = def(
    "hw.gpu.memory.limit",
    "By",
    Kind::UpDownCounter,
    "Device memory size",
)
.int();
pub const HW_GPU_MEMORY_UTILIZATION: MetricDef = gauge(
    "hw.gpu.memory.utilization",
    "1",
    "Share of device memory in use",
);
pub const MEMORY_SWING: MetricDef = gauge(
    "gpuslack.memory.swing",
    "By/s",
    "Fastest change of device memory in use between two samples of the window (allocation churn)",
);
pub const HW_GPU_IO: MetricDef = counter(
    "hw.gpu.io",
    "By",
    "Bytes over PCIe since the agent started, by direction",
)
.int();
pub const HW_TEMPERATURE: MetricDef = gauge(
    "hw.temperature",
    "Cel",
    "Highest temperature in the window (hw.sensor_location: gpu, memory)",
);
pub const HW_TEMPERATURE_LIMIT: MetricDef = gauge(
    "hw.temperature.limit",
    "Cel",
    "Temperature at which the GPU slows down (hw.limit_type high.degraded)",
);
pub const HW_ERRORS: MetricDef = counter(
    "hw.errors",
    "{error}",
    "Errors since the agent started (error.type corrected/uncorrected for ECC, replay/crc/recovery for links, xid; gpuslack.error.source ecc, pcie, nvlink, driver)",
).int();
pub const HW_STATUS: MetricDef = def(
    "hw.status",
    "1",
    Kind::UpDownCounter,
    "1 for the GPU's health state (hw.state ok, degraded, failed), 0 for the others",
)
.int();
pub const SM_ACTIVITY: MetricDef = gauge(
    "gpuslack.sm.activity",
    "1",
    "GPM SM activity: share of SM cycles with a warp resident",
);
pub const SM_OCCUPANCY: MetricDef = gauge("gpuslack.sm.occupancy", "1", "GPM SM occupancy");
pub const PIPE_ACTIVITY: MetricDef = gauge(
    "gpuslack.pipe.activity",
    "1",
    "GPM activity of each arithmetic pipe (gpuslack.pipe: tensor, fp32, fp16, fp64, integer)",
);
pub const DRAM_ACTIVITY: MetricDef = gauge(
    "gpuslack.dram.activity",
    "1",
    "GPM DRAM bandwidth utilisation",
);
pub const NVLINK_IO: MetricDef = counter(
    "gpuslack.nvlink.io",
    "By",
    "Bytes over NVLink since the agent started, by direction",
)
.int();
pub const CLOCK_SM: MetricDef = gauge("gpuslack.clock.sm", "Hz", "SM clock");
pub const CLOCK_MEMORY: MetricDef = gauge("gpuslack.clock.memory", "Hz", "Memory clock");
pub const POWER_LIMIT: MetricDef = gauge("gpuslack.power.limit", "W", "Enforced power limit");
pub const POWER_MIN_LIMIT: MetricDef = gauge(
    "gpuslack.power.min_limit",
    "W",
    "Lowest power limit an administrator may set",
);
pub const POWER_MAX_LIMIT: MetricDef = gauge(
    "gpuslack.power.max_limit",
    "W",
    "Highest power limit an administrator may set: a cap below it can be lifted",
);
pub const POWER_TDP: MetricDef = gauge(
    "gpuslack.power.tdp",
    "W",
    "Default power limit (TDP) the efficiency divides by",
);
pub const THROTTLE: MetricDef = gauge(
    "gpuslack.throttle",
    "1",
    "Share of the window's samples with each clock-event reason (gpuslack.throttle.reason)",
);
pub const EFFICIENCY: MetricDef = gauge(
    "gpuslack.efficiency",
    "1",
    "Effective efficiency: (power / TDP) × SM activity; under 0.6 the GPU is likely slacking",
);
pub const DIAGNOSIS: MetricDef = gauge(
    "gpuslack.diagnosis",
    "1",
    "1 for the GPU's current verdict (gpuslack.diagnosis.class), 0 for the others; every point carries the verdict's gpuslack.diagnosis.confidence",
);
pub const DIAGNOSIS_TIME: MetricDef = counter(
    "gpuslack.diagnosis.time",
    "s",
    "GPU time spent in each verdict since the agent started: the cost of slack in GPU-seconds",
);
pub const DIAGNOSIS_ENERGY: MetricDef = counter(
    "gpuslack.diagnosis.energy",
    "J",
    "Energy spent in each verdict since the agent started: the cost of slack in joules",
);
pub const EFFICIENCY_CALIBRATED: MetricDef = gauge(
    "gpuslack.efficiency.calibrated",
    "1",
    "Power placed between this GPU's own idle (0) and compute-bound (1) baselines, from its calibration profile",
);
pub const POWER_EXPECTED: MetricDef = gauge(
    "gpuslack.power.expected",
    "W",
    "What this GPU draws, by its profile, when it does what its current verdict says",
);
/// One series per GPU at a time: the unit the figure measures is its `gpuslack.headroom.unit`
/// attribute, one of [`crate::diagnosis::Resource`]'s fixed names (tensor, fp32, fp16, fp64,
/// integer, dram, memory_controller, pcie, power), never a value per window.
pub const HEADROOM: MetricDef = gauge(
    "gpuslack.headroom",
    "1",
    "The fraction of its peak at which the unit nearest its peak ran in the latest window (the roofline; the unit in gpuslack.headroom.unit); absent for idle and held windows",
);
/// The headroom gauge's one attribute: which unit its figure measures.
pub const HEADROOM_UNIT: &str = "gpuslack.headroom.unit";
pub const ECC_ERRORS: MetricDef = gauge(
    "gpuslack.ecc.errors",
    "{error}",
    "NVML's ECC counts as they stand (error.type; gpuslack.ecc.counter volatile = since the driver loaded, aggregate = the board's life)",
).int();
pub const REMAPPED_ROWS: MetricDef = gauge(
    "gpuslack.memory.remapped_rows",
    "{row}",
    "Memory rows remapped, by the error that caused it (error.type corrected, uncorrected)",
)
.int();
pub const REMAP_PENDING: MetricDef = gauge(
    "gpuslack.memory.remap.pending",
    "1",
    "1 when a row remap waits for a GPU reset",
)
.int();
pub const REMAP_FAILED: MetricDef = gauge(
    "gpuslack.memory.remap.failed",
    "1",
    "1 when a row remap failed: the GPU needs service",
)
.int();
pub const RETIRED_PAGES: MetricDef = gauge(
    "gpuslack.memory.retired_pages",
    "{page}",
    "Memory pages retired (before Ampere), by cause (gpuslack.retirement.cause single_bit, double_bit)",
).int();
pub const RETIREMENT_PENDING: MetricDef = gauge(
    "gpuslack.memory.retirement.pending",
    "1",
    "1 when a page retirement waits for a GPU reset",
)
.int();
pub const XID_LAST: MetricDef = gauge(
    "gpuslack.xid.last",
    "{xid}",
    "Code of the last Xid event since the agent started; 0 for none",
)
.int();

pub const GR_ENGINE_ACTIVITY: MetricDef = gauge(
    "gpuslack.gr_engine.activity",
    "1",
    "GPM graphics-engine activity: share of time the graphics/compute engine had work (dcgm-exporter's DCGM_FI_PROF_GR_ENGINE_ACTIVE)",
);
pub const MEMORY_CONTROLLER_UTILIZATION: MetricDef = gauge(
    "gpuslack.memory_controller.utilization",
    "1",
    "NVML's memory utilisation: share of time device memory was read or written (dcgm-exporter's DCGM_FI_DEV_MEM_COPY_UTIL)",
);
pub const PERFORMANCE_STATE: MetricDef = gauge(
    "gpuslack.performance_state",
    "{pstate}",
    "Performance state, 0 (P0, the most performance) to 15: the window's highest (slowest)",
)
.int();
pub const BAR1_USAGE: MetricDef = def(
    "gpuslack.bar1.usage",
    "By",
    Kind::UpDownCounter,
    "BAR1 in use: device memory mapped for the host and peers (pinned staging, GPUDirect)",
)
.int();
pub const BAR1_LIMIT: MetricDef = def(
    "gpuslack.bar1.limit",
    "By",
    Kind::UpDownCounter,
    "BAR1 size",
)
.int();
pub const PCIE_LINK_GENERATION: MetricDef = gauge(
    "gpuslack.pcie.link.generation",
    "{generation}",
    "PCIe link generation (gpuslack.pcie.link.bound current, max: the most this GPU and slot allow); the current one drops at idle to save power",
)
.int();
pub const PCIE_LINK_WIDTH: MetricDef = gauge(
    "gpuslack.pcie.link.width",
    "{lane}",
    "PCIe link width (gpuslack.pcie.link.bound current, max); current below max is a downtrained link",
)
.int();
pub const FAN_SPEED_RATIO: MetricDef = gauge(
    "gpuslack.fan.speed",
    "1",
    "Fan speed as a share of its maximum, averaged over the board's fans",
);
pub const NVLINK_LINKS: MetricDef = gauge(
    "gpuslack.nvlink.links",
    "{link}",
    "NVLink links by state (gpuslack.nvlink.state up, down: present but inactive)",
)
.int();
pub const XID_ERRORS: MetricDef = counter(
    "gpuslack.xid.errors",
    "{xid}",
    "Xid events since the agent started by code (gpuslack.xid.code) with the catalogue's action (gpuslack.xid.action); only codes seen, at most 8 a GPU, then other",
)
.int();
pub const NVLINK_LINK_ERRORS: MetricDef = gauge(
    "gpuslack.nvlink.link.errors",
    "{error}",
    "NVML's error counts of one NVLink as they stand, since the driver loaded (gpuslack.nvlink.link; error.type crc, replay, recovery): only links that have any, or are down",
)
.int();
pub const GPU_INFO: MetricDef = gauge(
    "gpuslack.gpu.info",
    "1",
    "1 for each GPU, with its identity: model, driver, VBIOS (hw.firmware_version), serial number, PCI bus id: join it on hw.id",
)
.int();

pub const JOB_INFO: MetricDef = gauge(
    "gpuslack.job.info",
    "1",
    "1 for the job of the GPU's current owner, with the job's identity (rank, world size, Slurm's and Kubernetes' ids; gpuslack.job.state running or allocated_idle): join it on hw.id for the job's labels",
)
.int();

pub const ALL: [MetricDef; 55] = [
    HW_POWER,
    HW_ENERGY,
    HW_GPU_UTILIZATION,
    HW_GPU_MEMORY_USAGE,
    HW_GPU_MEMORY_LIMIT,
    HW_GPU_MEMORY_UTILIZATION,
    MEMORY_SWING,
    HW_GPU_IO,
    HW_TEMPERATURE,
    HW_TEMPERATURE_LIMIT,
    HW_ERRORS,
    HW_STATUS,
    SM_ACTIVITY,
    SM_OCCUPANCY,
    PIPE_ACTIVITY,
    DRAM_ACTIVITY,
    NVLINK_IO,
    CLOCK_SM,
    CLOCK_MEMORY,
    POWER_LIMIT,
    POWER_MIN_LIMIT,
    POWER_MAX_LIMIT,
    POWER_TDP,
    THROTTLE,
    EFFICIENCY,
    EFFICIENCY_CALIBRATED,
    POWER_EXPECTED,
    DIAGNOSIS,
    DIAGNOSIS_TIME,
    DIAGNOSIS_ENERGY,
    HEADROOM,
    ECC_ERRORS,
    REMAPPED_ROWS,
    REMAP_PENDING,
    REMAP_FAILED,
    RETIRED_PAGES,
    RETIREMENT_PENDING,
    XID_LAST,
    GR_ENGINE_ACTIVITY,
    MEMORY_CONTROLLER_UTILIZATION,
    PERFORMANCE_STATE,
    BAR1_USAGE,
    BAR1_LIMIT,
    PCIE_LINK_GENERATION,
    PCIE_LINK_WIDTH,
    FAN_SPEED_RATIO,
    NVLINK_LINKS,
    NVLINK_LINK_ERRORS,
    XID_ERRORS,
    GPU_INFO,
    PROCESS_SM,
    PROCESS_MEMORY,
    PROCESS_CPU,
    POD_ASSIGNMENT,
    JOB_INFO,
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
)
.int();
pub const PROCESS_CPU: MetricDef = gauge(
    "gpuslack.process.cpu.utilization",
    "1",
    "Host CPU a process holding the GPU uses, 1 = one core (attribute gpuslack.thread: all or busiest)",
);

pub const POD_ASSIGNMENT: MetricDef = gauge(
    "gpuslack.gpu.assignment",
    "{container}",
    "1 for each Kubernetes container the kubelet assigned the GPU to: several where pods time-slice it",
).int();

/// dcgm-exporter's field names for `--metrics dcgm` (issue #49): each as dcgm-exporter declares
/// it (etc/default-counters.csv at NVIDIA/dcgm-exporter 691c927, the 4.5.3-4.8.2 release: the
/// name, the Prometheus type, the help text), with DCGM's unit (dcgmlib/src/dcgm_fields.cpp)
/// and DCGM's scale: MHz, °C, W, mJ, MiB, % (0–100) for the `DEV` fields, ratios (0–1) and
/// bytes per second for the `PROF` fields. A name is rendered as it is, with no unit suffix and
/// no `_total`, so that NVIDIA's dashboard, its alert examples and Datadog's `dcgm` check read
/// it unchanged. The values come from a GPU's view in [`super::dcgm`]; docs/EXPORT.md,
/// "dcgm-exporter's names", says where each comes from.
const fn dcgm(
    name: &'static str,
    kind: Kind,
    unit: &'static str,
    description: &'static str,
) -> MetricDef {
    def(name, unit, kind, description)
}

/// The default counters of dcgm-exporter's etc/default-counters.csv (all but the two in
/// [`DCGM_NOT_READ`] and the driver version, which is a label), in the file's order.
pub const DCGM_DEFAULT: [MetricDef; 23] = [
    dcgm("DCGM_FI_DEV_SM_CLOCK", Kind::Gauge, "MHz", "SM clock frequency (in MHz)."),
    dcgm("DCGM_FI_DEV_MEM_CLOCK", Kind::Gauge, "MHz", "Memory clock frequency (in MHz)."),
    dcgm("DCGM_FI_DEV_MEMORY_TEMP", Kind::Gauge, "Cel", "Memory temperature (in C)."),
    dcgm("DCGM_FI_DEV_GPU_TEMP", Kind::Gauge, "Cel", "GPU temperature (in C)."),
    dcgm("DCGM_FI_DEV_POWER_USAGE", Kind::Gauge, "W", "Power draw (in W)."),
    dcgm(
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        Kind::Counter,
        "mJ",
        "Total energy consumption since boot (in mJ).",
    )
    .int(),
    dcgm(
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        Kind::Counter,
        "{replay}",
        "Total number of PCIe retries.",
    )
    .int(),
    dcgm("DCGM_FI_DEV_GPU_UTIL", Kind::Gauge, "%", "GPU utilization (in %)."),
    dcgm("DCGM_FI_DEV_MEM_COPY_UTIL", Kind::Gauge, "%", "Memory utilization (in %)."),
    dcgm("DCGM_FI_DEV_ENC_UTIL", Kind::Gauge, "%", "Encoder utilization (in %)."),
    dcgm("DCGM_FI_DEV_DEC_UTIL", Kind::Gauge, "%", "Decoder utilization (in %)."),
    dcgm(
        "DCGM_FI_DEV_XID_ERRORS",
        Kind::Gauge,
        "{xid}",
        "Value of the last XID error encountered.",
    )
    .int(),
    dcgm("DCGM_FI_DEV_FB_FREE", Kind::Gauge, "MiBy", "Framebuffer memory free (in MiB).").int(),
    dcgm("DCGM_FI_DEV_FB_USED", Kind::Gauge, "MiBy", "Framebuffer memory used (in MiB).").int(),
    dcgm(
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        Kind::Counter,
        "MiBy/s",
        "Total number of NVLink bandwidth counters for all lanes.",
    )
    .int(),
    dcgm(
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        Kind::Counter,
        "{row}",
        "Number of remapped rows for uncorrectable errors",
    )
    .int(),
    dcgm(
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        Kind::Counter,
        "{row}",
        "Number of remapped rows for correctable errors",
    )
    .int(),
    dcgm(
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        Kind::Gauge,
        "1",
        "Whether remapping of rows has failed",
    )
    .int(),
    dcgm(
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        Kind::Gauge,
        "1",
        "Ratio of time the graphics engine is active.",
    ),
    dcgm(
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        Kind::Gauge,
        "1",
        "Ratio of cycles the tensor (HMMA) pipe is active.",
    ),
    dcgm(
        "DCGM_FI_PROF_DRAM_ACTIVE",
        Kind::Gauge,
        "1",
        "Ratio of cycles the device memory interface is active sending or receiving data.",
    ),
    dcgm(
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        Kind::Gauge,
        "By/s",
        "The rate of data transmitted over the PCIe bus - including both protocol headers and data payloads - in bytes per second.",
    ),
    dcgm(
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        Kind::Gauge,
        "By/s",
        "The rate of data received over the PCIe bus - including both protocol headers and data payloads - in bytes per second.",
    ),
];

/// The profiling fields GPM gives beyond the defaults (dcgm-exporter ships them commented out
/// in etc/dcp-metrics-included.csv, with these help texts; the NVLink two, DCGM's fields 1011
/// and 1012, have none there and are described after DCGM's header, as the PCIe two are).
pub const DCGM_PROFILING: [MetricDef; 7] = [
    dcgm(
        "DCGM_FI_PROF_SM_ACTIVE",
        Kind::Gauge,
        "1",
        "The ratio of cycles an SM has at least 1 warp assigned.",
    ),
    dcgm(
        "DCGM_FI_PROF_SM_OCCUPANCY",
        Kind::Gauge,
        "1",
        "The ratio of number of warps resident on an SM.",
    ),
    dcgm(
        "DCGM_FI_PROF_PIPE_FP64_ACTIVE",
        Kind::Gauge,
        "1",
        "Ratio of cycles the fp64 pipes are active.",
    ),
    dcgm(
        "DCGM_FI_PROF_PIPE_FP32_ACTIVE",
        Kind::Gauge,
        "1",
        "Ratio of cycles the fp32 pipes are active.",
    ),
    dcgm(
        "DCGM_FI_PROF_PIPE_FP16_ACTIVE",
        Kind::Gauge,
        "1",
        "Ratio of cycles the fp16 pipes are active.",
    ),
    dcgm(
        "DCGM_FI_PROF_NVLINK_TX_BYTES",
        Kind::Gauge,
        "By/s",
        "The rate of data transmitted over NvLink - including both header and payload - in bytes per second.",
    ),
    dcgm(
        "DCGM_FI_PROF_NVLINK_RX_BYTES",
        Kind::Gauge,
        "By/s",
        "The rate of data received over NvLink - including both header and payload - in bytes per second.",
    ),
];

/// The fields Datadog's `dcgm` check maps by default beyond the two lists above
/// (dcgm/datadog_checks/dcgm/metrics.py in DataDog/integrations-core), help texts from DCGM's
/// field header.
pub const DCGM_DATADOG: [MetricDef; 8] = [
    dcgm(
        "DCGM_FI_DEV_COUNT",
        Kind::Gauge,
        "{gpu}",
        "Number of Devices on the node.",
    )
    .int(),
    dcgm(
        "DCGM_FI_DEV_FAN_SPEED",
        Kind::Gauge,
        "%",
        "Fan speed for the device in percent 0-100.",
    ),
    dcgm(
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
        Kind::Gauge,
        "1",
        "Current clock event reasons (bitmask of DCGM_CLOCKS_EVENT_REASON_*).",
    )
    .int(),
    dcgm(
        "DCGM_FI_DEV_FB_TOTAL",
        Kind::Gauge,
        "MiBy",
        "Total Frame Buffer of the GPU in MB.",
    )
    .int(),
    dcgm(
        "DCGM_FI_DEV_FB_USED_PERCENT",
        Kind::Gauge,
        "1",
        "Ratio of Frame Buffer used: 'Used/(Total - Reserved)'. Range 0.0-1.0.",
    ),
    dcgm(
        "DCGM_FI_DEV_POWER_MGMT_LIMIT",
        Kind::Gauge,
        "W",
        "Current Power limit for the device.",
    ),
    dcgm(
        "DCGM_FI_DEV_PSTATE",
        Kind::Gauge,
        "{pstate}",
        "Performance state (P-State) 0-15. 0=highest.",
    )
    .int(),
    dcgm(
        "DCGM_FI_DEV_SLOWDOWN_TEMP",
        Kind::Gauge,
        "Cel",
        "Slowdown temperature for the device.",
    ),
];

/// Every dcgm-exporter field gpuslack exports, in the order of the three lists.
pub const DCGM_FIELDS: [MetricDef; 38] = {
    let mut out = [DCGM_DEFAULT[0]; 38];
    let mut i = 0;
    while i < DCGM_DEFAULT.len() {
        out[i] = DCGM_DEFAULT[i];
        i += 1;
    }
    let mut j = 0;
    while j < DCGM_PROFILING.len() {
        out[i + j] = DCGM_PROFILING[j];
        j += 1;
    }
    let mut k = 0;
    while k < DCGM_DATADOG.len() {
        out[i + j + k] = DCGM_DATADOG[k];
        k += 1;
    }
    out
};

/// dcgm-exporter's default fields gpuslack does not read, and why: NVML's v1 memory
/// information, which the agent reads, has no reserved figure (the reserved memory counts as
/// used); the vGPU licence is a guest's, and a bare-metal GPU has none (DCGM reports it blank
/// there, and dcgm-exporter skips blank values).
pub const DCGM_NOT_READ: [(&str, &str); 2] = [
    (
        "DCGM_FI_DEV_FB_RESERVED",
        "NVML's v1 memory information has no reserved figure: it counts as used",
    ),
    (
        "DCGM_FI_DEV_VGPU_LICENSE_STATUS",
        "a vGPU guest's licence; a bare-metal GPU has none",
    ),
];

/// dcgm-exporter's label for the driver version (etc/default-counters.csv's one `label` row).
pub const DCGM_DRIVER_LABEL: &str = "DCGM_FI_DRIVER_VERSION";

/// Per-link NVLink error series a GPU can have at most: 18 links (NVML_NVLINK_MAX_LINKS) × 3
/// error types, each only while its link has errors or is down.
pub const MAX_NVLINK_LINK_SERIES: usize = 18 * 3;

/// Assignment series kept per GPU: time-slicing hands out replicas by the dozen at most.
pub const MAX_ASSIGNMENT_SERIES: usize = 32;

/// Per-process series kept per GPU by default: the processes with the largest SM share.
pub const DEFAULT_TOP_PROCESSES: usize = 5;

pub const AGENT_WINDOWS: MetricDef = counter(
    "gpuslack.agent.windows",
    "{window}",
    "Windows the agent produced, and at the export that followed them delivered or dropped (attribute outcome)",
).int();
pub const AGENT_EXPORTS: MetricDef = counter(
    "gpuslack.agent.exports",
    "{export}",
    "OTLP exports by signal and outcome, failures by reason (connect, tls, timeout, auth, throttled, unavailable, rejected, redirected, protocol, network, too_large, shutdown, other)",
).int();
pub const AGENT_POINTS: MetricDef = counter(
    "gpuslack.agent.points",
    "{point}",
    "Metric data points the OTLP exports delivered or dropped (attribute outcome)",
)
.int();
pub const AGENT_LOG_RECORDS: MetricDef = counter(
    "gpuslack.agent.log_records",
    "{record}",
    "Diagnosis-change log records emitted, delivered or dropped (attribute outcome)",
)
.int();
pub const AGENT_SCRAPES: MetricDef = counter(
    "gpuslack.agent.scrapes",
    "{scrape}",
    "Prometheus scrapes of /metrics served",
)
.int();

/// The sending queues' gauges, named as the semantic conventions name a resource's use and its
/// bound (`*.usage`, `*.limit`): how near each signal's queue is to dropping its oldest.
pub const AGENT_QUEUE_USAGE: MetricDef = gauge(
    "gpuslack.agent.queue.usage",
    "By",
    "Bytes waiting in a signal's OTLP sending queue (attribute signal)",
)
.int();
pub const AGENT_QUEUE_LIMIT: MetricDef = gauge(
    "gpuslack.agent.queue.limit",
    "By",
    "The bound of a signal's OTLP sending queue, past which its oldest batches are dropped (--otlp-queue-mib)",
)
.int();
pub const AGENT_QUEUE_BATCHES: MetricDef = gauge(
    "gpuslack.agent.queue.batches",
    "{batch}",
    "Batches waiting in a signal's OTLP sending queue (attribute signal)",
)
.int();

/// The agent's own metrics: what became of what it produced. Not tied to a GPU.
pub const AGENT: [MetricDef; 8] = [
    AGENT_WINDOWS,
    AGENT_EXPORTS,
    AGENT_POINTS,
    AGENT_LOG_RECORDS,
    AGENT_SCRAPES,
    AGENT_QUEUE_USAGE,
    AGENT_QUEUE_LIMIT,
    AGENT_QUEUE_BATCHES,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_name_is_one_another_gpu_integration_uses() {
        for def in ALL.into_iter().chain(AGENT) {
            assert!(
                def.name.starts_with("hw.") || def.name.starts_with("gpuslack."),
                "{}",
                def.name
            );
        }
    }

    #[test]
    fn every_metric_is_documented_with_its_unit() {
        let doc = include_str!("../../../docs/EXPORT.md");
        for def in ALL.into_iter().chain(AGENT) {
            let row = format!("| `{}` | {} |", def.name, def.unit);
            assert!(doc.contains(&row), "docs/EXPORT.md lacks {row}");
        }
    }
}
