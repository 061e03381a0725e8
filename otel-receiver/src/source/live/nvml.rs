//! The only module that talks to NVML. It turns each [`Field`] into the NVML calls that read it
//! and NVML's errors into the sampler's three kinds: not supported, GPU lost, failed.
//!
//! A GPU in MIG mode is sampled twice over: as the whole GPU (power, clocks, temperature,
//! energy and limits are the GPU's) and as each of its instances (memory, processes, and GPM
//! through the parent's `nvmlGpmMigSampleGet`), which get indices after the physical GPUs.

use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enum_wrappers::device::{
    Clock, EccCounter, MemoryError, PcieUtilCounter, RetirementCause, TemperatureSensor,
    TemperatureThreshold,
};
use nvml_wrapper::enums::device::{SampleValue, UsedGpuMemory};
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::enums::gpm::GpmMetricId;
use nvml_wrapper::error::{nvml_try, NvmlError};
use nvml_wrapper::gpm::{gpm_metrics_get, GpmSample};
use nvml_wrapper::structs::device::FieldId;
use nvml_wrapper::{Device, Nvml};
use nvml_wrapper_sys::bindings::{
    nvmlDevice_t, nvmlGpmSample_t, nvmlMemory_t, nvmlReturn_t, NvmlLib,
};

use std::sync::atomic::{AtomicU64, Ordering};

use super::backend::{DeviceReader, Field, ReadError};
use crate::device::DeviceFacts;
use crate::sample::{Metric, Sample};

/// NVML field ids (nvml.h): instantaneous and averaged power, in mW.
const FI_DEV_POWER_AVERAGE: u32 = 185;
const FI_DEV_POWER_INSTANT: u32 = 186;
/// NVLink data sent and received since the driver loaded, KiB, summed over the GPU's links.
const FI_DEV_NVLINK_THROUGHPUT_DATA_TX: u32 = 138;
const FI_DEV_NVLINK_THROUGHPUT_DATA_RX: u32 = 139;

/// HBM temperature (°C), and NVLink errors since the driver loaded, summed over links.
const FI_DEV_MEMORY_TEMP: u32 = 82;
const FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL: u32 = 45;
const FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL: u32 = 52;
const FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL: u32 = 59;

const KIB: f64 = 1024.0;

/// GPM metrics we read, and the trace metric each becomes. Graphics-engine activity is left out
/// on purpose: computing it costs 1.4 ms of CPU on an H200, the other eleven together ~30 µs
/// (scripts/device/gpm_cost.py), and SM activity says more.
const GPM_METRICS: [(GpmMetricId, Metric); 11] = [
    (GpmMetricId::SmUtil, Metric::GpmSm),
    (GpmMetricId::SmOccupancy, Metric::GpmOcc),
    (GpmMetricId::AnyTensorUtil, Metric::GpmTensor),
    (GpmMetricId::DramBwUtil, Metric::GpmDram),
    (GpmMetricId::Fp32Util, Metric::GpmFp32),
    (GpmMetricId::Fp16Util, Metric::GpmFp16),
    (GpmMetricId::Fp64Util, Metric::GpmFp64),
    (GpmMetricId::PcieTxPerSec, Metric::GpmPcieTx),
    (GpmMetricId::PcieRxPerSec, Metric::GpmPcieRx),
    (GpmMetricId::NvlinkTotalTxPerSec, Metric::GpmNvlinkTx),
    (GpmMetricId::NvlinkTotalRxPerSec, Metric::GpmNvlinkRx),
];

/// Why NVML could not be opened. Each message names what to check.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("the NVIDIA driver's NVML library (libnvidia-ml.so.1) could not be loaded: {0}; is the NVIDIA driver installed?")]
    NoLibrary(String),
    #[error("the NVIDIA driver is not loaded (NVML: {0}); check `nvidia-smi`")]
    NoDriver(String),
    #[error("no permission to talk to the NVIDIA driver (NVML: {0}); run as a user with access to /dev/nvidia*")]
    NoPermission(String),
    #[error("NVML failed to start: {0}")]
    Other(String),
    #[error("NVML found no GPU on this machine")]
    NoGpu,
}

const LIBRARY: &str = "libnvidia-ml.so.1";

type GpmSampleGetFn = unsafe extern "C" fn(nvmlDevice_t, nvmlGpmSample_t) -> nvmlReturn_t;
type GpmMigSampleGetFn =
    unsafe extern "C" fn(nvmlDevice_t, std::ffi::c_uint, nvmlGpmSample_t) -> nvmlReturn_t;
type MemoryInfoFn = unsafe extern "C" fn(nvmlDevice_t, *mut nvmlMemory_t) -> nvmlReturn_t;
type GpuInstanceIdFn = unsafe extern "C" fn(nvmlDevice_t, *mut std::ffi::c_uint) -> nvmlReturn_t;
type RemappedRowsFn = unsafe extern "C" fn(
    nvmlDevice_t,
    *mut std::ffi::c_uint,
    *mut std::ffi::c_uint,
    *mut std::ffi::c_uint,
    *mut std::ffi::c_uint,
) -> nvmlReturn_t;

/// What a MIG instance has of its own; the rest belongs to its GPU.
const MIG_INSTANCE_FIELDS: [Field; 3] = [Field::Memory, Field::Processes, Field::Gpm];

/// Calls made directly, through a second handle on the same loaded library (`dlopen` is
/// reference-counted: it is the same instance nvml-wrapper uses). nvml-wrapper allocates a new
/// GPM sample on every read (~180 µs of CPU on an H200, where refilling one costs ~40 µs) and
/// only offers the v2 memory query (~70 µs, where v1 costs ~6 µs); at 10 Hz these two are most
/// of the agent's CPU time. It has no call for a MIG instance's GPU-instance id, nor for the
/// remapped-row counts, at all.
#[derive(Clone, Copy)]
struct HotCalls {
    gpm_sample_get: Option<GpmSampleGetFn>,
    gpm_mig_sample_get: Option<GpmMigSampleGetFn>,
    memory_info_v1: Option<MemoryInfoFn>,
    gpu_instance_id: Option<GpuInstanceIdFn>,
    remapped_rows: Option<RemappedRowsFn>,
}

impl HotCalls {
    fn load() -> HotCalls {
        // SAFETY: loading the NVML library runs no code of ours; the symbols are typed as nvml.h
        // declares them.
        match unsafe { NvmlLib::new(LIBRARY) } {
            Ok(lib) => {
                let calls = HotCalls {
                    gpm_sample_get: lib.nvmlGpmSampleGet.as_ref().ok().copied(),
                    gpm_mig_sample_get: lib.nvmlGpmMigSampleGet.as_ref().ok().copied(),
                    memory_info_v1: lib.nvmlDeviceGetMemoryInfo.as_ref().ok().copied(),
                    gpu_instance_id: lib.nvmlDeviceGetGpuInstanceId.as_ref().ok().copied(),
                    remapped_rows: lib.nvmlDeviceGetRemappedRows.as_ref().ok().copied(),
                };
                // Keep the library loaded for the life of the process, like the Nvml handle.
                std::mem::forget(lib);
                calls
            }
            Err(_) => HotCalls {
                gpm_sample_get: None,
                gpm_mig_sample_get: None,
                memory_info_v1: None,
                gpu_instance_id: None,
                remapped_rows: None,
            },
        }
    }
}

/// An opened NVML, for the life of the process (leaked once so that devices and GPM samples,
/// which borrow it, can live in long-running samplers without self-references).
pub struct NvmlBackend {
    nvml: &'static Nvml,
    hot: HotCalls,
}

impl NvmlBackend {
    pub fn open() -> Result<NvmlBackend, OpenError> {
        let nvml = Nvml::init().map_err(|e| match e {
            NvmlError::LibloadingError(inner) => OpenError::NoLibrary(inner.to_string()),
            NvmlError::LibraryNotFound => OpenError::NoLibrary(e.to_string()),
            NvmlError::DriverNotLoaded => OpenError::NoDriver(e.to_string()),
            NvmlError::NoPermission => OpenError::NoPermission(e.to_string()),
            other => OpenError::Other(other.to_string()),
        })?;
        Ok(NvmlBackend {
            nvml: Box::leak(Box::new(nvml)),
            hot: HotCalls::load(),
        })
    }

    pub fn driver_version(&self) -> Option<String> {
        self.nvml.sys_driver_version().ok()
    }

    /// Every GPU NVML can open, by index, then the MIG instances of GPUs in MIG mode, numbered
    /// on from the last GPU. A GPU or instance that fails to open is logged and left out.
    pub fn devices(&self) -> Result<Vec<(u32, NvmlDevice)>, OpenError> {
        let count = self
            .nvml
            .device_count()
            .map_err(|e| OpenError::Other(e.to_string()))?;
        let driver = self.driver_version();
        let xid = XidWatch::start(self.nvml, count);
        let open = |device, scope| NvmlDevice {
            nvml: self.nvml,
            hot: self.hot,
            device,
            scope,
            driver: driver.clone(),
            gpm: None,
            gpm_extended: false,
            gpm_unrefreshed: 0,
            nvlink_last: None,
            process_shares: ProcessShares::default(),
            xid: xid.clone(),
        };
        let mut gpus = Vec::new();
        let mut instances = Vec::new();
        for index in 0..count {
            match self.nvml.device_by_index(index) {
                Ok(device) => {
                    if device.mig_mode().is_ok_and(|m| m.current == 1) {
                        for (instance, scope) in self.mig_instances(index, &device) {
                            instances.push(open(instance, scope));
                        }
                    }
                    gpus.push((index, open(device, Scope::Gpu)));
                }
                Err(e) => tracing::warn!(gpu = index, error = %e, "cannot open GPU; skipping it"),
            }
        }
        if gpus.is_empty() {
            return Err(OpenError::NoGpu);
        }
        gpus.extend((count..).zip(instances));
        Ok(gpus)
    }

    /// The MIG instances of GPU `index`, each with its scope: the GPU-instance id GPM needs and
    /// a handle of its own on the parent.
    fn mig_instances(&self, index: u32, gpu: &Device<'static>) -> Vec<(Device<'static>, Scope)> {
        let slots = match gpu.mig_device_count() {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(gpu = index, error = %e, "MIG is enabled but its instances cannot be counted; sampling the whole GPU only");
                return Vec::new();
            }
        };
        let mut out = Vec::new();
        for slot in 0..slots {
            // Slots without an instance answer NotFound: MIG slots are sparse.
            let Ok(instance) = gpu.mig_device_by_index(slot) else {
                continue;
            };
            let scope = self.gpu_instance_id(&instance).and_then(|gpu_instance_id| {
                Ok(Scope::MigInstance {
                    // A second handle on the same GPU: handles are plain pointers.
                    parent: self.nvml.device_by_index(index)?,
                    parent_index: index,
                    gpu_instance_id,
                })
            });
            match scope {
                Ok(scope) => out.push((instance, scope)),
                Err(e) => {
                    tracing::warn!(gpu = index, slot, error = %e, "cannot open a MIG instance (its GPU-instance id or its GPU's handle); skipping it")
                }
            }
        }
        tracing::info!(
            gpu = index,
            instances = out.len(),
            "MIG is enabled: sampling each instance as well as the whole GPU"
        );
        out
    }

    fn gpu_instance_id(&self, instance: &Device<'static>) -> Result<u32, NvmlError> {
        let get = self
            .hot
            .gpu_instance_id
            .ok_or(NvmlError::FunctionNotFound)?;
        let mut id = 0;
        // SAFETY: a live MIG device handle and a pointer to a c_uint, as nvml.h declares.
        nvml_try(unsafe { get(instance.handle(), &mut id) })?;
        Ok(id)
    }
}

/// What an [`NvmlDevice`] stands for.
enum Scope {
    /// A whole GPU (in MIG mode or not).
    Gpu,
    /// One MIG instance of GPU `parent_index`.
    MigInstance {
        parent: Device<'static>,
        parent_index: u32,
        gpu_instance_id: u32,
    },
}

pub struct NvmlDevice {
    nvml: &'static Nvml,
    hot: HotCalls,
    /// The GPU's handle, or the MIG instance's.
    device: Device<'static>,
    scope: Scope,
    driver: Option<String>,
    /// The previous GPM sample and a spare buffer, refilled in turn.
    gpm: Option<(GpmSample<'static>, Option<GpmSample<'static>>)>,
    /// Whether the previous sample is being kept across a tick because the pair read before
    /// the driver refreshed its counters.
    gpm_extended: bool,
    /// GPM pairs found unrefreshed and measured again over a longer span.
    gpm_unrefreshed: u64,
    /// The last NVLink counter reading: (µs, KiB sent, KiB received).
    nvlink_last: Option<(i64, f64, f64)>,
    process_shares: ProcessShares,
    /// Xid counts of every GPU, kept by the Xid thread; `None` where events cannot be had.
    xid: Option<std::sync::Arc<XidWatch>>,
}

/// Xid events since the agent started, per GPU index: how many, and the last code. NVML hands
/// events to whoever waits on an event set, so one thread waits for all GPUs and the sampler's
/// reads copy its counts (an atomic load each), whatever the cadence.
pub struct XidWatch {
    counts: Vec<(AtomicU64, AtomicU64)>,
}

impl XidWatch {
    /// Registers every GPU that can report Xid events and starts the waiting thread; `None`
    /// when no GPU can (a MIG instance never can: events are the GPU's).
    fn start(nvml: &'static Nvml, gpus: u32) -> Option<std::sync::Arc<XidWatch>> {
        let mut set = match nvml.create_event_set() {
            Ok(set) => set,
            Err(e) => {
                tracing::info!(error = %e, "NVML events unavailable: Xid errors will not be counted");
                return None;
            }
        };
        let mut registered = 0;
        for index in 0..gpus {
            let Ok(device) = nvml.device_by_index(index) else {
                continue;
            };
            let supported = device
                .supported_event_types()
                .is_ok_and(|t| t.contains(EventTypes::CRITICAL_XID_ERROR));
            if !supported {
                continue;
            }
            match device.register_events(EventTypes::CRITICAL_XID_ERROR, set) {
                Ok(back) => {
                    set = back;
                    registered += 1;
                }
                // A failed registration frees the set: start again with a new one for the rest.
                Err(e) => {
                    tracing::warn!(gpu = index, error = %e.error, "cannot register for Xid events");
                    match nvml.create_event_set() {
                        Ok(fresh) => set = fresh,
                        Err(_) => return None,
                    }
                }
            }
        }
        if registered == 0 {
            return None;
        }
        let watch = std::sync::Arc::new(XidWatch {
            counts: (0..gpus)
                .map(|_| (AtomicU64::new(0), AtomicU64::new(0)))
                .collect(),
        });
        let seen = watch.clone();
        let spawned = std::thread::Builder::new()
            .name("gpuslack-xid".into())
            .spawn(move || loop {
                // Times out every second so that an interrupted wait costs nothing; the thread
                // lives as long as the process.
                match set.wait(1000) {
                    Ok(event) => {
                        let code = match event.event_data {
                            Some(XidError::Value(code)) => code,
                            _ => 0,
                        };
                        let index = event.device.index().unwrap_or(u32::MAX);
                        tracing::warn!(gpu = index, xid = code, "Xid error reported by the driver");
                        if let Some((n, last)) = seen.counts.get(index as usize) {
                            n.fetch_add(1, Ordering::Relaxed);
                            last.store(code, Ordering::Relaxed);
                        }
                    }
                    Err(NvmlError::Timeout) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "waiting for Xid events failed; no more are counted");
                        return;
                    }
                }
            });
        match spawned {
            Ok(_) => Some(watch),
            Err(e) => {
                tracing::warn!(error = %e, "cannot start the Xid thread");
                None
            }
        }
    }
}

/// How often NVML's per-process SM shares are asked for. The process list is read every
/// second, but the shares cost 2.4–2.6 ms of CPU a read on an H200 (0.26% of a core a GPU at
/// 1 s, more than the rest of the agent together); every 5 s, averaged over every sample
/// the driver took since, they cost a fifth of that and say more than the newest sample.
const PROCESS_SHARES_PERIOD: std::time::Duration = std::time::Duration::from_secs(5);

/// Each process's SM share (%), averaged over the samples of the last read.
#[derive(Default)]
struct ProcessShares {
    /// The newest sample seen (µs), so that each read asks only for newer ones.
    seen_us: Option<u64>,
    read_at: Option<std::time::Instant>,
    sm_pct: std::collections::HashMap<u32, f64>,
}

fn classify(e: NvmlError) -> ReadError {
    match e {
        NvmlError::NotSupported
        | NvmlError::FunctionNotFound
        | NvmlError::FailedToLoadSymbol(_) => ReadError::NotSupported,
        NvmlError::GpuLost => ReadError::GpuLost(e.to_string()),
        other => ReadError::Failed(other.to_string()),
    }
}

fn sample_value(v: &SampleValue) -> f64 {
    match *v {
        SampleValue::F64(v) => v,
        SampleValue::U32(v) => f64::from(v),
        SampleValue::U64(v) => v as f64,
        SampleValue::I64(v) => v as f64,
    }
}

impl DeviceReader for NvmlDevice {
    fn facts(&mut self) -> DeviceFacts {
        let d = &self.device;
        if let Scope::MigInstance { parent_index, .. } = &self.scope {
            return DeviceFacts {
                name: d.name().ok(),
                uuid: d.uuid().ok(),
                driver: self.driver.clone(),
                mem_total_bytes: d.memory_info().ok().map(|m| m.total as f64),
                mig_parent: Some(*parent_index),
                ..DeviceFacts::default()
            };
        }
        let limit_range_w = d.power_management_limit_constraints().ok().map(|c| {
            (
                f64::from(c.min_limit) / 1000.0,
                f64::from(c.max_limit) / 1000.0,
            )
        });
        DeviceFacts {
            name: d.name().ok(),
            uuid: d.uuid().ok(),
            driver: self.driver.clone(),
            tdp_w: d
                .power_management_limit_default()
                .ok()
                .map(|mw| f64::from(mw) / 1000.0),
            power_limit_w: d
                .enforced_power_limit()
                .ok()
                .map(|mw| f64::from(mw) / 1000.0),
            power_limit_min_w: limit_range_w.map(|(min, _)| min),
            power_limit_max_w: limit_range_w.map(|(_, max)| max),
            temp_slowdown_c: d
                .temperature_threshold(TemperatureThreshold::Slowdown)
                .ok()
                .map(f64::from),
            mem_total_bytes: d.memory_info().ok().map(|m| m.total as f64),
            minor_number: d.minor_number().ok(),
            mig_parent: None,
        }
    }

    fn fields(&self) -> &'static [Field] {
        match self.scope {
            Scope::Gpu => &Field::ALL,
            Scope::MigInstance { .. } => &MIG_INSTANCE_FIELDS,
        }
    }

    fn read(&mut self, field: Field, s: &mut Sample) -> Result<(), ReadError> {
        let d = &self.device;
        match field {
            Field::Utilization => {
                let u = d.utilization_rates().map_err(classify)?;
                s.set(Metric::UtilGpu, f64::from(u.gpu));
                s.set(Metric::UtilMem, f64::from(u.memory));
            }
            Field::Power => s.set(
                Metric::PowerMw,
                f64::from(d.power_usage().map_err(classify)?),
            ),
            Field::PowerFields => {
                let ids = [FieldId(FI_DEV_POWER_INSTANT), FieldId(FI_DEV_POWER_AVERAGE)];
                let values = d.field_values_for(&ids).map_err(classify)?;
                let mut any = false;
                for (value, metric) in values.iter().zip([Metric::PowerInstMw, Metric::PowerAvgMw])
                {
                    if let Ok(sample) = value {
                        if let Ok(v) = &sample.value {
                            s.set(metric, sample_value(v));
                            any = true;
                        }
                    }
                }
                if !any {
                    return Err(ReadError::NotSupported);
                }
            }
            Field::Energy => s.set(
                Metric::EnergyMj,
                d.total_energy_consumption().map_err(classify)? as f64,
            ),
            Field::Clocks => {
                s.set(
                    Metric::SmMhz,
                    f64::from(d.clock_info(Clock::SM).map_err(classify)?),
                );
                if let Ok(mhz) = d.clock_info(Clock::Memory) {
                    s.set(Metric::MemMhz, f64::from(mhz));
                }
            }
            Field::Temperature => s.set(
                Metric::TempC,
                f64::from(d.temperature(TemperatureSensor::Gpu).map_err(classify)?),
            ),
            Field::PerformanceState => {
                let state = d.performance_state().map_err(classify)?;
                let index = state.as_c();
                // NVML_PSTATE_UNKNOWN is 32: not a state to report.
                if index > 15 {
                    return Err(ReadError::Failed("performance state unknown".into()));
                }
                s.set(Metric::Pstate, f64::from(index));
            }
            Field::ClockReasons => {
                s.clk_reasons = Some(d.current_throttle_reasons().map_err(classify)?.bits());
            }
            Field::Memory => {
                let (used, total) = match self.hot.memory_info_v1 {
                    Some(get) => {
                        let mut m = nvmlMemory_t {
                            total: 0,
                            free: 0,
                            used: 0,
                        };
                        // SAFETY: a valid device handle and a struct of the v1 layout.
                        nvml_try(unsafe { get(d.handle(), &mut m) }).map_err(classify)?;
                        (m.used, m.total)
                    }
                    None => {
                        let m = d.memory_info().map_err(classify)?;
                        (m.used, m.total)
                    }
                };
                s.set(Metric::MemUsedBytes, used as f64);
                s.set(Metric::MemTotalBytes, total as f64);
            }
            Field::Processes => self.read_processes(s)?,
            Field::Limits => {
                let enforced = d.enforced_power_limit().map_err(classify)?;
                s.set(Metric::PowerLimitMw, f64::from(enforced));
                if let Ok(default) = d.power_management_limit_default() {
                    s.set(Metric::PowerDefaultLimitMw, f64::from(default));
                }
                if let Ok(c) = d.temperature_threshold(TemperatureThreshold::Slowdown) {
                    s.set(Metric::TempSlowdownC, f64::from(c));
                }
            }
            Field::Gpm => self.read_gpm(s)?,
            Field::NvlinkThroughput => self.read_nvlink(s)?,
            Field::PcieThroughput => {
                // KB/s, as NVML counts them (1024 bytes); each call waits ~20 ms to measure.
                let tx = d.pcie_throughput(PcieUtilCounter::Send).map_err(classify)?;
                let rx = d
                    .pcie_throughput(PcieUtilCounter::Receive)
                    .map_err(classify)?;
                s.set(Metric::NvmlPcieTx, f64::from(tx) / KIB);
                s.set(Metric::NvmlPcieRx, f64::from(rx) / KIB);
            }
            Field::MemoryTemperature => {
                let values = d
                    .field_values_for(&[FieldId(FI_DEV_MEMORY_TEMP)])
                    .map_err(classify)?;
                let value = values
                    .into_iter()
                    .next()
                    .ok_or(ReadError::NotSupported)?
                    .map_err(classify)?
                    .value
                    .map_err(classify)?;
                s.set(Metric::MemTempC, sample_value(&value));
            }
            Field::Codec => {
                let enc = d.encoder_utilization().map_err(classify)?;
                s.set(Metric::UtilEnc, f64::from(enc.utilization));
                if let Ok(dec) = d.decoder_utilization() {
                    s.set(Metric::UtilDec, f64::from(dec.utilization));
                }
            }
            Field::Health => self.read_health(s)?,
            Field::Xid => {
                let xid = self.xid.as_ref().ok_or(ReadError::NotSupported)?;
                let index = d.index().map_err(classify)?;
                let (n, last) = xid
                    .counts
                    .get(index as usize)
                    .ok_or(ReadError::NotSupported)?;
                s.set(Metric::XidEvents, n.load(Ordering::Relaxed) as f64);
                s.set(Metric::XidLast, last.load(Ordering::Relaxed) as f64);
            }
        }
        Ok(())
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![("gpm_unrefreshed_pairs", self.gpm_unrefreshed)]
    }
}

impl NvmlDevice {
    /// GPM metrics are rates between two samples: fill one now, compare it with the last, and
    /// keep the older buffer to refill next time.
    fn read_gpm(&mut self, s: &mut Sample) -> Result<(), ReadError> {
        let (previous, spare) = match self.gpm.take() {
            Some(pair) => pair,
            None => {
                if !self.parent().gpm_support().map_err(classify)? {
                    return Err(ReadError::NotSupported);
                }
                self.gpm = Some((self.fresh_gpm_sample()?, None));
                return Ok(());
            }
        };
        let current = match spare {
            Some(buffer) => self.refill(buffer)?,
            None => self.fresh_gpm_sample()?,
        };
        let ids = GPM_METRICS.map(|(id, _)| id);
        let results = gpm_metrics_get(self.nvml, &previous, &current, &ids).map_err(classify)?;
        // Two samples within one refresh of the driver's counters (NVML asks for over 100 ms
        // between them; a tick's jitter makes some pairs shorter) hold equal counters: every
        // rate reads 0 and DRAM bandwidth 0/0. Nothing was measured, so nothing is written:
        // the older sample is kept and the next tick measures over the longer span. A second
        // such pair in a row is believed.
        let unrefreshed = results.iter().all(|r| {
            r.as_ref()
                .map_or(true, |m| m.value == 0.0 || !m.value.is_finite())
        });
        if unrefreshed && !self.gpm_extended {
            self.gpm_extended = true;
            self.gpm_unrefreshed += 1;
            self.gpm = Some((previous, Some(current)));
            return Ok(());
        }
        self.gpm_extended = false;
        for (result, (_, metric)) in results.iter().zip(GPM_METRICS) {
            if let Ok(r) = result {
                if r.value.is_finite() && r.value >= 0.0 {
                    s.set(metric, r.value);
                }
            }
        }
        self.gpm = Some((current, Some(previous)));
        Ok(())
    }

    /// The processes holding the GPU: PID and GPU memory, and each one's share of SM time,
    /// asked for every `PROCESS_SHARES_PERIOD` while any process runs.
    fn read_processes(&mut self, s: &mut Sample) -> Result<(), ReadError> {
        let running = self.device.running_compute_processes().map_err(classify)?;
        let due = self
            .process_shares
            .read_at
            .is_none_or(|at| at.elapsed() >= PROCESS_SHARES_PERIOD);
        if due && !running.is_empty() {
            self.read_process_shares()?;
        }
        s.set(Metric::Nprocs, running.len() as f64);
        let shares = &self.process_shares.sm_pct;
        let processes = running
            .iter()
            .map(|p| crate::attribution::GpuProcess {
                pid: p.pid,
                gpu_mem_bytes: match p.used_gpu_memory {
                    UsedGpuMemory::Used(bytes) => Some(bytes as f64),
                    UsedGpuMemory::Unavailable => None,
                },
                sm_pct: shares.get(&p.pid).copied(),
                ..Default::default()
            })
            .collect();
        s.processes = Some(std::sync::Arc::new(processes));
        Ok(())
    }

    /// Asks for every per-process sample newer than the last read
    /// (`nvmlDeviceGetProcessUtilization`, which answers NotFound when no process has any) and
    /// averages each process's; a process with no new samples has no share until the next.
    fn read_process_shares(&mut self) -> Result<(), ReadError> {
        let shares = &mut self.process_shares;
        shares.read_at = Some(std::time::Instant::now());
        let samples = match self.device.process_utilization_stats(shares.seen_us) {
            Ok(samples) => samples,
            Err(NvmlError::GpuLost) => return Err(ReadError::GpuLost("GPU lost".into())),
            // NotFound (no process has samples), NotSupported: no shares this time.
            Err(_) => Vec::new(),
        };
        if let Some(newest) = samples.iter().map(|u| u.timestamp).max() {
            shares.seen_us = Some(newest);
        }
        let mut sums: std::collections::HashMap<u32, (f64, u32)> = Default::default();
        for u in samples {
            let (sum, n) = sums.entry(u.pid).or_default();
            *sum += f64::from(u.sm_util);
            *n += 1;
        }
        shares.sm_pct = sums
            .into_iter()
            .map(|(pid, (sum, n))| (pid, sum / f64::from(n)))
            .collect();
        Ok(())
    }

    /// The health counters, each on its own: a GPU without ECC (most GeForce boards) still
    /// counts PCIe replays. Not supported only when none of them is.
    fn read_health(&self, s: &mut Sample) -> Result<(), ReadError> {
        let d = &self.device;
        let mut any = false;
        let mut set = |s: &mut Sample, metric, value: Result<f64, NvmlError>| match value {
            Ok(v) => {
                s.set(metric, v);
                any = true;
                Ok(())
            }
            Err(NvmlError::GpuLost) => Err(ReadError::GpuLost("GPU lost".into())),
            Err(_) => Ok(()),
        };
        for (metric, error, counter) in [
            (
                Metric::EccVolatileCorrected,
                MemoryError::Corrected,
                EccCounter::Volatile,
            ),
            (
                Metric::EccVolatileUncorrected,
                MemoryError::Uncorrected,
                EccCounter::Volatile,
            ),
            (
                Metric::EccAggregateCorrected,
                MemoryError::Corrected,
                EccCounter::Aggregate,
            ),
            (
                Metric::EccAggregateUncorrected,
                MemoryError::Uncorrected,
                EccCounter::Aggregate,
            ),
        ] {
            set(
                s,
                metric,
                d.total_ecc_errors(error, counter).map(|n| n as f64),
            )?;
        }
        if let Some(get) = self.hot.remapped_rows {
            let (mut corrected, mut uncorrected, mut pending, mut failed) = (0, 0, 0, 0);
            // SAFETY: a valid device handle and four c_uint out-parameters, as nvml.h declares.
            let read = nvml_try(unsafe {
                get(
                    d.handle(),
                    &mut corrected,
                    &mut uncorrected,
                    &mut pending,
                    &mut failed,
                )
            });
            if read.is_ok() {
                for (metric, v) in [
                    (Metric::RemapCorrected, corrected),
                    (Metric::RemapUncorrected, uncorrected),
                    (Metric::RemapPending, pending),
                    (Metric::RemapFailed, failed),
                ] {
                    set(s, metric, Ok(f64::from(v)))?;
                }
            }
        }
        for (metric, cause) in [
            (
                Metric::RetiredSingleBit,
                RetirementCause::MultipleSingleBitEccErrors,
            ),
            (Metric::RetiredDoubleBit, RetirementCause::DoubleBitEccError),
        ] {
            set(s, metric, d.retired_pages(cause).map(|p| p.len() as f64))?;
        }
        set(
            s,
            Metric::RetiredPending,
            d.are_pages_pending_retired()
                .map(|p| f64::from(u8::from(p))),
        )?;
        set(
            s,
            Metric::PcieReplays,
            d.pcie_replay_counter().map(f64::from),
        )?;
        let ids = [
            FieldId(FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL),
            FieldId(FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL),
            FieldId(FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL),
        ];
        if let Ok(values) = d.field_values_for(&ids) {
            for (value, metric) in values.into_iter().zip([
                Metric::NvlinkCrcErrors,
                Metric::NvlinkReplayErrors,
                Metric::NvlinkRecoveryErrors,
            ]) {
                if let Ok(Ok(v)) = value.map(|v| v.value) {
                    set(s, metric, Ok(sample_value(&v)))?;
                }
            }
        }
        if any {
            Ok(())
        } else {
            Err(ReadError::NotSupported)
        }
    }

    /// NVLink rates (MiB/s) from the difference of NVML's cumulative data counters since the
    /// last read, timed by the driver's own timestamps. The first read only sets the baseline;
    /// a counter that went backwards (a driver reload) sets a new one.
    fn read_nvlink(&mut self, s: &mut Sample) -> Result<(), ReadError> {
        let ids = [
            FieldId(FI_DEV_NVLINK_THROUGHPUT_DATA_TX),
            FieldId(FI_DEV_NVLINK_THROUGHPUT_DATA_RX),
        ];
        let values = self.device.field_values_for(&ids).map_err(classify)?;
        let mut read = values.into_iter().map(|v| {
            let v = v.map_err(classify)?;
            let value = v.value.map_err(classify)?;
            Ok((v.timestamp, sample_value(&value)))
        });
        let (Some(tx), Some(rx)) = (read.next(), read.next()) else {
            return Err(ReadError::NotSupported);
        };
        let ((t_us, tx_kib), (_, rx_kib)) = (tx?, rx?);
        if let Some((t0, tx0, rx0)) = self.nvlink_last {
            let dt_s = (t_us - t0) as f64 / 1e6;
            if dt_s > 0.0 && tx_kib >= tx0 && rx_kib >= rx0 {
                s.set(Metric::NvmlNvlinkTx, (tx_kib - tx0) / KIB / dt_s);
                s.set(Metric::NvmlNvlinkRx, (rx_kib - rx0) / KIB / dt_s);
            }
        }
        self.nvlink_last = Some((t_us, tx_kib, rx_kib));
        Ok(())
    }

    /// The whole GPU: this device, or a MIG instance's parent, whose handle GPM samples
    /// instances through.
    fn parent(&self) -> &Device<'static> {
        match &self.scope {
            Scope::Gpu => &self.device,
            Scope::MigInstance { parent, .. } => parent,
        }
    }

    fn fresh_gpm_sample(&self) -> Result<GpmSample<'static>, ReadError> {
        match &self.scope {
            Scope::Gpu => self.device.gpm_sample(),
            Scope::MigInstance {
                gpu_instance_id, ..
            } => self.parent().gpm_mig_sample(*gpu_instance_id),
        }
        .map_err(classify)
    }

    /// Refills an allocated GPM sample in place; allocates a new one where the direct call is
    /// not available.
    fn refill(&self, buffer: GpmSample<'static>) -> Result<GpmSample<'static>, ReadError> {
        let status = match (
            &self.scope,
            self.hot.gpm_sample_get,
            self.hot.gpm_mig_sample_get,
        ) {
            // SAFETY (both arms): the handles come from the same loaded library and are alive;
            // the sample is owned by `buffer`, which we return.
            (Scope::Gpu, Some(get), _) => unsafe { get(self.device.handle(), buffer.handle()) },
            (
                Scope::MigInstance {
                    gpu_instance_id, ..
                },
                _,
                Some(get),
            ) => unsafe { get(self.parent().handle(), *gpu_instance_id, buffer.handle()) },
            _ => return self.fresh_gpm_sample(),
        };
        nvml_try(status).map_err(classify)?;
        Ok(buffer)
    }
}
