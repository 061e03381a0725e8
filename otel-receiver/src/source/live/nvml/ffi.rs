//! The calls made directly rather than through nvml-wrapper, and GPM: the metrics read, the
//! sample buffers refilled in turn.

use super::*;

/// GPM metrics we read, and the trace metric each becomes. Graphics-engine activity is left out
/// on purpose: computing it costs 1.4 ms of CPU on an H200, the other eleven together ~30 µs
/// (measured once by scripts/device/gpm_cost.py, in git history), and SM activity says more.
/// The integer pipe and the tensor split are computed from the same two samples as the rest:
/// the roofline needs the integer pipe to tell sorts and hashing from latency-bound work, and
/// the split to say which kind of matrix work binds. A GPU without one of them answers that
/// metric alone with an error, which leaves its column empty.
const GPM_METRICS: [(GpmMetricId, Metric); 15] = [
    (GpmMetricId::SmUtil, Metric::GpmSm),
    (GpmMetricId::SmOccupancy, Metric::GpmOcc),
    (GpmMetricId::AnyTensorUtil, Metric::GpmTensor),
    (GpmMetricId::DramBwUtil, Metric::GpmDram),
    (GpmMetricId::Fp32Util, Metric::GpmFp32),
    (GpmMetricId::Fp16Util, Metric::GpmFp16),
    (GpmMetricId::Fp64Util, Metric::GpmFp64),
    (GpmMetricId::IntegerUtil, Metric::GpmInt),
    (GpmMetricId::HmmaTensorUtil, Metric::GpmHmma),
    (GpmMetricId::ImmaTensorUtil, Metric::GpmImma),
    (GpmMetricId::DfmaTensorUtil, Metric::GpmDfma),
    (GpmMetricId::PcieTxPerSec, Metric::GpmPcieTx),
    (GpmMetricId::PcieRxPerSec, Metric::GpmPcieRx),
    (GpmMetricId::NvlinkTotalTxPerSec, Metric::GpmNvlinkTx),
    (GpmMetricId::NvlinkTotalRxPerSec, Metric::GpmNvlinkRx),
];

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

/// Calls made directly, through a second handle on the same loaded library (`dlopen` is
/// reference-counted: it is the same instance nvml-wrapper uses). nvml-wrapper allocates a new
/// GPM sample on every read (~180 µs of CPU on an H200, where refilling one costs ~40 µs) and
/// only offers the v2 memory query (~70 µs, where v1 costs ~6 µs); at 10 Hz these two are most
/// of the agent's CPU time. It has no call for a MIG instance's GPU-instance id, nor for the
/// remapped-row counts, at all.
#[derive(Clone, Copy)]
pub(super) struct HotCalls {
    pub(super) gpm_sample_get: Option<GpmSampleGetFn>,
    pub(super) gpm_mig_sample_get: Option<GpmMigSampleGetFn>,
    pub(super) memory_info_v1: Option<MemoryInfoFn>,
    pub(super) gpu_instance_id: Option<GpuInstanceIdFn>,
    pub(super) remapped_rows: Option<RemappedRowsFn>,
}

impl HotCalls {
    pub(super) fn load() -> HotCalls {
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

impl NvmlDevice {
    /// GPM metrics are rates between two samples: fill one now, compare it with the last, and
    /// keep the older buffer to refill next time.
    pub(super) fn read_gpm(&mut self, s: &mut Sample) -> Result<(), ReadError> {
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

    /// The whole GPU: this device, or a MIG instance's parent, whose handle GPM samples
    /// instances through.
    pub(super) fn parent(&self) -> &Device<'static> {
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
