//! One GPU for the workloads: its context, a stream, and the kernels compiled for its own
//! architecture. Opening fails with a clear error, never a panic, where there is no driver.

use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaStream, DriverError};
use cudarc::nvrtc::{compile_ptx_with_opts, CompileOptions};

const KERNELS: &str = include_str!("kernels.cu");

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("no CUDA driver on this machine (libcuda.so could not be loaded): the benchmarks need an NVIDIA GPU and its driver")]
    NoDriver,
    #[error("NVRTC (libnvrtc.so, part of the CUDA toolkit) could not be loaded: set LD_LIBRARY_PATH to the CUDA lib64 folder")]
    NoNvrtc,
    #[error("cuBLASLt (libcublasLt.so) could not be loaded: set LD_LIBRARY_PATH to the CUDA lib64 folder")]
    NoCublasLt,
    #[error("no CUDA GPU found")]
    NoGpu,
    #[error("GPU {ordinal} does not exist: this machine has {count} GPU(s)")]
    NoSuchGpu { ordinal: usize, count: usize },
    #[error("{workload} needs {needed} GPUs; this machine has {found}")]
    NotEnoughGpus {
        workload: &'static str,
        needed: usize,
        found: usize,
    },
    #[error("compiling the kernels with NVRTC for {arch}: {message}")]
    Compile { arch: String, message: String },
    #[error("CUDA: {0}")]
    Driver(#[from] DriverError),
    #[error("cuBLASLt: {0}")]
    Cublas(#[from] cudarc::cublaslt::result::CublasError),
    #[error("{workload}: result check failed: {detail}")]
    WrongResult {
        workload: &'static str,
        detail: String,
    },
}

/// Number of CUDA GPUs, after checking that the driver library exists (cudarc panics on a
/// missing library otherwise).
pub fn gpu_count() -> Result<usize, BenchError> {
    // SAFETY: only tries to load the library and its symbols.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err(BenchError::NoDriver);
    }
    Ok(CudaContext::device_count()?.max(0) as usize)
}

/// Fails unless cuBLASLt can be loaded.
pub fn check_cublaslt() -> Result<(), BenchError> {
    // SAFETY: only tries to load the library and its symbols.
    if unsafe { cudarc::cublaslt::sys::is_culib_present() } {
        Ok(())
    } else {
        Err(BenchError::NoCublasLt)
    }
}

pub struct Gpu {
    pub ordinal: usize,
    pub name: String,
    pub sms: u32,
    pub compute_capability: (i32, i32),
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    module: Arc<CudaModule>,
}

impl Gpu {
    pub fn open(ordinal: usize) -> Result<Gpu, BenchError> {
        let count = gpu_count()?;
        if count == 0 {
            return Err(BenchError::NoGpu);
        }
        if ordinal >= count {
            return Err(BenchError::NoSuchGpu { ordinal, count });
        }
        // SAFETY: only tries to load the library and its symbols.
        if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            return Err(BenchError::NoNvrtc);
        }
        let ctx = CudaContext::new(ordinal)?;
        // Event tracking records an event per buffer per launch: it would dominate the cost of
        // tiny launches and breaks stream capture (CUDA_ERROR_STREAM_CAPTURE_ISOLATION). Every
        // workload here runs on one stream and synchronises explicitly.
        // SAFETY: no buffer is shared between streams in this crate.
        unsafe { ctx.disable_event_tracking() };
        let compute_capability = ctx.compute_capability()?;
        let sms = ctx.attribute(
            cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
        )? as u32;
        let arch = arch_name(compute_capability);
        let ptx = compile_ptx_with_opts(
            KERNELS,
            CompileOptions {
                arch: Some(arch),
                ..Default::default()
            },
        )
        .map_err(|e| BenchError::Compile {
            arch: arch.to_string(),
            message: e.to_string(),
        })?;
        let module = ctx.load_module(ptx)?;
        // A stream of its own: graph capture is not allowed on the legacy default stream.
        let stream = ctx.new_stream()?;
        Ok(Gpu {
            ordinal,
            name: ctx.name()?,
            sms,
            compute_capability,
            ctx,
            stream,
            module,
        })
    }

    pub fn function(&self, name: &str) -> Result<CudaFunction, BenchError> {
        Ok(self.module.load_function(name)?)
    }

    /// Device time of `work` in milliseconds, measured with CUDA events on this GPU's stream.
    pub fn time_ms(
        &self,
        work: impl FnOnce() -> Result<(), BenchError>,
    ) -> Result<f64, BenchError> {
        let flags = Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT);
        let start = self.ctx.new_event(flags)?;
        let end = self.ctx.new_event(flags)?;
        start.record(&self.stream)?;
        work()?;
        end.record(&self.stream)?;
        end.synchronize()?;
        Ok(f64::from(start.elapsed_ms(&end)?))
    }

    /// Wall time of `work` up to the end of everything it queued, in seconds: for host-bound work
    /// (launch rates, pageable copies) where the host is the bottleneck.
    pub fn wall_s(&self, work: impl FnOnce() -> Result<(), BenchError>) -> Result<f64, BenchError> {
        let started = Instant::now();
        work()?;
        self.stream.synchronize()?;
        Ok(started.elapsed().as_secs_f64())
    }
}

/// NVRTC target for a compute capability: the device's own machine code, not PTX for an older
/// one that the driver would have to JIT.
fn arch_name((major, minor): (i32, i32)) -> &'static str {
    match (major, minor) {
        (7, 0) => "sm_70",
        (7, 5) => "sm_75",
        (8, 0) => "sm_80",
        (8, 6) => "sm_86",
        (8, 9) => "sm_89",
        (9, 0) => "sm_90",
        (10, 0) => "sm_100",
        (12, 0) => "sm_120",
        // A newer chip: its PTX target, compiled by the driver on load.
        (major, minor) => Box::leak(format!("compute_{major}{minor}").into_boxed_str()),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn targets_the_devices_own_architecture() {
        assert_eq!(super::arch_name((9, 0)), "sm_90");
        assert_eq!(super::arch_name((13, 1)), "compute_131");
    }
}
