//! The NVML-shaped seam between the sampler's logic and the driver. The sampler asks a
//! [`DeviceReader`] for one [`Field`] at a time; the real reader calls NVML, the tests' reader
//! plays back faults, missing fields and lost GPUs.

use crate::device::DeviceFacts;
use crate::sample::Sample;

/// A group of values read together, each on its own cadence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Field {
    /// GPU-Util and memory-controller utilisation.
    Utilization,
    /// `nvmlDeviceGetPowerUsage`.
    Power,
    /// Instantaneous and averaged power field values.
    PowerFields,
    /// Total energy counter: 4.2 ms a call on an H200, so read on a slower cadence.
    Energy,
    /// SM and memory clocks.
    Clocks,
    Temperature,
    PerformanceState,
    /// Clock-event (throttle) reasons.
    ClockReasons,
    /// Memory used and total.
    Memory,
    /// Number of processes holding a compute context.
    Processes,
    /// Enforced and default power limits, slowdown temperature: they rarely change.
    Limits,
    /// GPM metrics from the pair (previous sample, this sample).
    Gpm,
    /// NVLink data throughput counters (NVML field values), differenced into rates.
    NvlinkThroughput,
    /// `nvmlDeviceGetPcieThroughput`, both directions: ~20 ms of waiting a call, so read
    /// after every other field of the tick and for few GPUs a tick.
    PcieThroughput,
    /// HBM temperature (a field value).
    MemoryTemperature,
    /// Video encoder and decoder utilisation.
    Codec,
    /// Health counters: ECC errors (volatile and aggregate), remapped rows or retired pages,
    /// PCIe replays, NVLink CRC/replay/recovery errors. They change rarely and an SRE reads
    /// them in minutes: every 10 s.
    Health,
    /// Xid events, which NVML delivers to a thread of their own; reading copies its counts.
    Xid,
    /// BAR1 memory used and total: one call, but 370–480 µs of CPU on an H200: every 10 s.
    Bar1,
    /// The PCIe link's current and maximum generation and width: four calls, 110–150 µs of
    /// CPU together on an H200: every 10 s.
    PcieLink,
    /// Fan speed of every fan on the board: every 10 s (fans change slowly).
    Fan,
    /// Each NVLink's state (18 calls on an H200): every 10 s, with the health counters.
    NvlinkState,
}

impl Field {
    pub const ALL: [Field; 22] = [
        Field::Utilization,
        Field::Power,
        Field::PowerFields,
        Field::Energy,
        Field::Clocks,
        Field::Temperature,
        Field::PerformanceState,
        Field::ClockReasons,
        Field::Memory,
        Field::Processes,
        Field::Limits,
        Field::Gpm,
        Field::NvlinkThroughput,
        Field::PcieThroughput,
        Field::MemoryTemperature,
        Field::Codec,
        Field::Health,
        Field::Xid,
        Field::Bar1,
        Field::PcieLink,
        Field::Fan,
        Field::NvlinkState,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Field::Utilization => "utilization",
            Field::Power => "power",
            Field::PowerFields => "power field values",
            Field::Energy => "total energy",
            Field::Clocks => "clocks",
            Field::Temperature => "temperature",
            Field::PerformanceState => "performance state",
            Field::ClockReasons => "clock-event reasons",
            Field::Memory => "memory",
            Field::Processes => "running processes",
            Field::Limits => "power limits",
            Field::Gpm => "GPM metrics",
            Field::NvlinkThroughput => "NVLink throughput counters",
            Field::PcieThroughput => "PCIe throughput",
            Field::MemoryTemperature => "memory temperature",
            Field::Codec => "encoder/decoder utilization",
            Field::Health => "ECC, row remapping, PCIe replay and NVLink error counters",
            Field::Xid => "Xid events",
            Field::Bar1 => "BAR1 memory",
            Field::PcieLink => "PCIe link generation and width",
            Field::Fan => "fan speed",
            Field::NvlinkState => "NVLink link state",
        }
    }

    /// Fields whose read waits long enough (tens of ms) to upset the timing of the others:
    /// read after every fast field of the tick, a few GPUs at a time.
    pub fn is_slow(self) -> bool {
        matches!(self, Field::PcieThroughput)
    }
}

/// Why a read failed, as far as the sampler cares.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    /// This GPU or driver does not have it: skip the field from now on.
    #[error("not supported")]
    NotSupported,
    /// The GPU fell off the bus or stopped answering: stop sampling it.
    #[error("GPU lost: {0}")]
    GpuLost(String),
    /// Anything else: leave the value out of this sample and try again next time.
    #[error("{0}")]
    Failed(String),
}

/// One GPU as the sampler sees it.
pub trait DeviceReader {
    /// Static facts, read once when sampling starts; fields the driver lacks are `None`.
    fn facts(&mut self) -> DeviceFacts;

    /// The fields this kind of device has at all. The others are never asked for and never
    /// reported missing: a MIG instance has no power or clocks of its own, by design.
    fn fields(&self) -> &'static [Field] {
        &Field::ALL
    }

    /// Reads one field into `sample`.
    fn read(&mut self, field: Field, sample: &mut Sample) -> Result<(), ReadError>;

    /// Counters of what the reader noticed and handled itself (e.g. GPM pairs read before the
    /// driver refreshed them), by name, for the end-of-run summary and the self-metrics.
    fn counters(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
}
