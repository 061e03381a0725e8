//! One GPU for the workloads: its context, a stream, and the kernels compiled for its own
//! architecture. Opening fails with a clear error, never a panic, where there is no driver.

use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{
    CudaContext, CudaFunction, CudaGraph, CudaModule, CudaStream, DriverError, LaunchConfig,
    PushKernelArg,
};
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
    // The cause is the error's source: `{:#}` prints it once, after the prefix.
    #[error("CUDA")]
    Driver(#[from] DriverError),
    #[error("cuBLASLt")]
    Cublas(#[from] cudarc::cublaslt::result::CublasError),
    #[error("{workload}: {detail}")]
    Unsupported {
        workload: &'static str,
        detail: String,
    },
    #[error("stream capture produced no CUDA graph")]
    EmptyCapture,
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
    /// L2 cache size: what a working set must exceed by far to measure DRAM, not L2.
    pub l2_bytes: u64,
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
        let l2_bytes = ctx
            .attribute(cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)?
            .max(0) as u64;
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
            l2_bytes,
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

    /// Device time of `work` without the host's launch latency in it: a kernel holds the
    /// stream while the start event, `work` and the end event are queued behind it, so the
    /// GPU goes from the start event straight into `work` (nvbench's blocking kernel).
    /// Otherwise the GPU waits there for the launch, 3–4 µs: 0.2% of a 2 ms copy, enough to
    /// decide whether a copy reaches the HBM's limit. Not for rates the host sets, such as
    /// eager launches.
    pub fn time_queued_ms(
        &self,
        work: impl FnOnce() -> Result<(), BenchError>,
    ) -> Result<f64, BenchError> {
        /// Long beside queueing two events and a launch, short beside the work timed.
        const HOLD_NS: u64 = 200_000;
        let hold = self.function("hold_stream")?;
        let mut builder = self.stream.launch_builder(&hold);
        builder.arg(&HOLD_NS);
        let one_thread = LaunchConfig {
            grid_dim: (1, 1, 1),
            block_dim: (1, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: hold_stream(unsigned long long) in kernels.cu.
        unsafe { builder.launch(one_thread) }?;
        self.time_ms(work)
    }

    /// The most threads a block of `function` may have: fewer than the device's 1024 when the
    /// kernel needs many registers per thread.
    pub fn max_threads_per_block(&self, function: &CudaFunction) -> Result<u32, BenchError> {
        use cudarc::driver::sys::{cuFuncGetAttribute, CUfunction_attribute};
        let mut threads = 0;
        self.ctx.bind_to_thread()?;
        // SAFETY: the function handle is live; `threads` is a valid out-pointer.
        unsafe {
            cuFuncGetAttribute(
                &mut threads,
                CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
                function.cu_function(),
            )
        }
        .result()?;
        Ok(threads.max(0) as u32)
    }

    /// Lets this GPU reach `peer`'s memory directly (NVLink or PCIe peer-to-peer), so that
    /// copies between them do not bounce through the host. False where the hardware cannot;
    /// copies then still work, staged by the driver.
    pub fn enable_peer_access(&self, peer: &Gpu) -> Result<bool, BenchError> {
        use cudarc::driver::sys::{
            cuCtxEnablePeerAccess, cuDeviceCanAccessPeer, cuDeviceGetMemPool, cuMemPoolSetAccess,
            CUmemAccessDesc, CUmemAccess_flags, CUmemLocation, CUmemLocationType, CUresult,
        };
        let mut can = 0;
        // SAFETY: both device handles are live; `can` is a valid out-pointer.
        unsafe { cuDeviceCanAccessPeer(&mut can, self.ctx.cu_device(), peer.ctx.cu_device()) }
            .result()?;
        if can == 0 {
            return Ok(false);
        }
        self.ctx.bind_to_thread()?;
        // SAFETY: the peer context is live for as long as `peer` is.
        match unsafe { cuCtxEnablePeerAccess(peer.ctx.cu_ctx(), 0) } {
            CUresult::CUDA_SUCCESS | CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED => {}
            other => other.result()?,
        }
        // cudarc allocates from the device's stream-ordered memory pool where it has one, and
        // context peer access does not cover pool memory: the peer's pool must grant it too
        // (without this, copies ran at 38 GB/s through the host instead of 380 over NVLink).
        if peer.ctx.has_async_alloc() {
            let mut pool = std::ptr::null_mut();
            let access = CUmemAccessDesc {
                location: CUmemLocation {
                    type_: CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
                    id: self.ctx.cu_device(),
                },
                flags: CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
            };
            // SAFETY: `pool` receives the peer device's current pool; `access` is one valid
            // descriptor.
            unsafe {
                cuDeviceGetMemPool(&mut pool, peer.ctx.cu_device()).result()?;
                cuMemPoolSetAccess(pool, &access, 1).result()?;
            }
        }
        Ok(true)
    }

    /// Captures the launches `work` queues on this GPU's stream into a CUDA graph, uploaded and
    /// ready to replay.
    pub fn capture(
        &self,
        work: impl FnOnce() -> Result<(), BenchError>,
    ) -> Result<CudaGraph, BenchError> {
        self.stream
            .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)?;
        let captured = work();
        // Capture must end even when `work` failed, or the stream stays in capture mode.
        let graph = self.stream.end_capture(CUgraphInstantiate_flags(0))?;
        captured?;
        let graph = graph.ok_or(BenchError::EmptyCapture)?;
        graph.upload()?;
        Ok(graph)
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
        (7, 2) => "sm_72",
        (7, 5) => "sm_75",
        (8, 0) => "sm_80",
        (8, 6) => "sm_86",
        (8, 7) => "sm_87",
        (8, 9) => "sm_89",
        (9, 0) => "sm_90",
        (10, 0) => "sm_100",
        (10, 3) => "sm_103",
        (12, 0) => "sm_120",
        (12, 1) => "sm_121",
        // A newer chip: its PTX target, compiled by the driver on load.
        (major, minor) => Box::leak(format!("compute_{major}{minor}").into_boxed_str()),
    }
}

#[cfg(test)]
mod tests {
    /// The datacenter architectures a calibration may meet: Volta to Blackwell.
    const ARCHS: [i32; 8] = [70, 75, 80, 86, 89, 90, 100, 120];

    /// The architectures the loaded NVRTC can target.
    fn supported_archs() -> Vec<i32> {
        use cudarc::nvrtc::sys;
        let mut n = 0;
        // SAFETY: NVRTC writes one int, then `n` ints into a buffer of that size.
        unsafe {
            if sys::nvrtcGetNumSupportedArchs(&mut n) != sys::nvrtcResult::NVRTC_SUCCESS {
                return Vec::new();
            }
            let mut archs = vec![0; n.max(0) as usize];
            if sys::nvrtcGetSupportedArchs(archs.as_mut_ptr()) != sys::nvrtcResult::NVRTC_SUCCESS {
                return Vec::new();
            }
            archs
        }
    }

    /// The kernels compile for every architecture from sm_70 to sm_120 that the loaded NVRTC
    /// targets, and define every entry point the workloads load. Needs NVRTC (a CUDA toolkit or
    /// NVIDIA's wheels, which scripts/test.sh installs: CUDA 13's targets sm_75 and later, 12.4's
    /// sm_70 to sm_90; the script runs this test with each) but no GPU. Where NVRTC is absent the
    /// test says so, and fails if GPUSLACK_REQUIRE_NVRTC is set; GPUSLACK_REQUIRE_ARCHS lists the
    /// architectures (e.g. `70 75`) this run must have compiled.
    #[test]
    fn kernels_compile_for_every_architecture_with_every_entry_point() {
        use cudarc::nvrtc::{compile_ptx_with_opts, CompileOptions};
        // SAFETY: only tries to load the library and its symbols.
        if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            assert!(
                std::env::var_os("GPUSLACK_REQUIRE_NVRTC").is_none(),
                "GPUSLACK_REQUIRE_NVRTC is set but libnvrtc could not be loaded"
            );
            eprintln!("skipped: no NVRTC on this machine");
            return;
        }
        let supported = supported_archs();
        let mut entries = vec![
            "tiny_step",
            "tiny_fused",
            "fma_chain",
            "init_random",
            "stream_dot",
            "latency_init_table",
            "latency_init_chase",
            "latency_init_items",
            "latency_gather",
            "latency_gather_sorted",
            "latency_chase",
            "latency_scatter",
            "latency_scatter_smem",
            "latency_copy_narrow",
            "latency_copy_full",
        ];
        let mut names = Vec::new();
        for op in ["copy", "scale", "add", "triad"] {
            for suffix in ["", "_u4", "_t1", "_t2", "_t4", "_t8", "_p1", "_p2", "_p4"] {
                names.push(format!("stream_{op}{suffix}"));
            }
        }
        entries.extend(names.iter().map(String::as_str));
        let mut compiled = Vec::new();
        for arch in ARCHS.into_iter().filter(|a| supported.contains(a)) {
            let name = super::arch_name((arch / 10, arch % 10));
            let ptx = compile_ptx_with_opts(
                super::KERNELS,
                CompileOptions {
                    arch: Some(name),
                    ..Default::default()
                },
            )
            .unwrap_or_else(|e| panic!("kernels.cu does not compile for {name}: {e}"));
            let ptx = ptx.to_src();
            for entry in &entries {
                assert!(
                    ptx.contains(&format!(".entry {entry}(")),
                    "kernels.cu has no entry point {entry} for {name}"
                );
            }
            compiled.push(arch);
        }
        eprintln!("compiled for {compiled:?} (NVRTC supports {supported:?})");
        assert!(!compiled.is_empty(), "NVRTC supports none of {ARCHS:?}");
        if let Ok(required) = std::env::var("GPUSLACK_REQUIRE_ARCHS") {
            for arch in required.split_whitespace() {
                let arch: i32 = arch.parse().expect("GPUSLACK_REQUIRE_ARCHS: numbers");
                assert!(compiled.contains(&arch), "sm_{arch} was not compiled");
            }
        }
    }

    #[test]
    fn the_tensor_workload_takes_the_gpus_own_16_bit_type() {
        use crate::workloads::compute::tensor_type;
        assert_eq!(tensor_type((7, 0)), "fp16");
        assert_eq!(tensor_type((7, 5)), "fp16");
        assert_eq!(tensor_type((8, 0)), "bf16");
        assert_eq!(tensor_type((9, 0)), "bf16");
        assert_eq!(tensor_type((12, 0)), "bf16");
    }

    #[test]
    fn targets_the_devices_own_architecture() {
        assert_eq!(super::arch_name((9, 0)), "sm_90");
        assert_eq!(super::arch_name((7, 0)), "sm_70");
        assert_eq!(super::arch_name((13, 1)), "compute_131");
    }
}
