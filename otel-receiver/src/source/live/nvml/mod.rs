//! The only module that talks to NVML. It turns each [`Field`] into the NVML calls that read it
//! and NVML's errors into the sampler's three kinds: not supported, GPU lost, failed.
//!
//! A GPU in MIG mode is sampled twice over: as the whole GPU (power, clocks, temperature,
//! energy and limits are the GPU's) and as each of its instances (memory, processes, and GPM
//! through the parent's `nvmlGpmMigSampleGet`), which get indices after the physical GPUs.
//!
//! Here: opening NVML and its GPUs, and the device type. The rest by what it is about:
//! `ffi` the calls made directly and GPM, `mig` MIG instances, `events` the Xid thread,
//! `fields` how each field is read.

#![warn(missing_docs)]

mod events;
mod ffi;
mod fields;
mod mig;

pub use events::XidWatch;
use ffi::HotCalls;
use fields::{classify, ProcessShares};
use mig::MIG_INSTANCE_FIELDS;

use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enum_wrappers::device::{
    Clock, EccCounter, MemoryError, PcieUtilCounter, RetirementCause, TemperatureSensor,
    TemperatureThreshold,
};
use nvml_wrapper::enum_wrappers::nv_link::ErrorCounter;
use nvml_wrapper::enums::device::{DeviceArchitecture, SampleValue, UsedGpuMemory};
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
use crate::spec::LiveFigures;

/// Why NVML could not be opened. Each message names what to check.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("NVML could not be loaded ({0}): the NVIDIA driver is not installed, or its libraries are not on the loader's path")]
    /// libnvidia-ml.so.1 cannot be loaded.
    NoLibrary(String),
    #[error("the NVIDIA driver is not loaded (NVML: {0}); check `nvidia-smi`")]
    /// The kernel driver is not loaded.
    NoDriver(String),
    #[error("no permission to talk to the NVIDIA driver (NVML: {0}); run as a user with access to /dev/nvidia*")]
    /// The user may not open /dev/nvidia*.
    NoPermission(String),
    #[error("NVML failed to start: {0}")]
    /// Any other failure of nvmlInit.
    Other(String),
    #[error("NVML found no GPU on this machine")]
    /// NVML started and found no GPU.
    NoGpu,
}

/// An opened NVML, for the life of the process (leaked once so that devices and GPM samples,
/// which borrow it, can live in long-running samplers without self-references).
pub struct NvmlBackend {
    nvml: &'static Nvml,
    hot: HotCalls,
}

impl NvmlBackend {
    /// Loads and starts NVML, with the calls made directly.
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

    /// The driver's version string.
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

/// One GPU or MIG instance as NVML reads it, for the live source.
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
