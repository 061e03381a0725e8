//! A 16-bit (bf16, or fp16 before Ampere) GEMM through cuBLASLt's own API rather than cudarc's `Matmul`, which always runs the
//! heuristic's first algorithm. Under a power cap that first choice is not always the fastest:
//! the candidates differ in tile shape and so in data movement, and so in watts per flop. Asking
//! for several and timing them is what cuBLASLt's documentation recommends for a fixed shape.

use std::ffi::c_void;
use std::mem;
use std::sync::Arc;

use cudarc::cublaslt::result::{self as lt, CublasError};
use cudarc::cublaslt::sys;
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut};

use crate::reference::Half;
use crate::BenchError;

/// cuBLASLt's name for each 16-bit type.
fn data_type<T: Half>() -> sys::cudaDataType_t {
    if T::NAME == "fp16" {
        sys::cudaDataType_t::CUDA_R_16F
    } else {
        sys::cudaDataType_t::CUDA_R_16BF
    }
}

/// cuBLASLt's recommended workspace on Hopper.
const WORKSPACE_BYTES: usize = 32 << 20;

/// Column-major `D = A·B` with A m×k, B k×n and D m×n, in `T` with f32 accumulation; every
/// handle is destroyed on drop.
pub(crate) struct LtGemm<T: Half> {
    stream: Arc<CudaStream>,
    handle: sys::cublasLtHandle_t,
    desc: sys::cublasLtMatmulDesc_t,
    layouts: [sys::cublasLtMatrixLayout_t; 3],
    pref: sys::cublasLtMatmulPreference_t,
    workspace: CudaSlice<u8>,
    /// The heuristic's candidates, best-guess first.
    algos: Vec<sys::cublasLtMatmulAlgo_t>,
    element: std::marker::PhantomData<T>,
}

impl<T: Half> LtGemm<T> {
    /// Plans the GEMM and asks the heuristic for up to `candidates` algorithms.
    pub(crate) fn new(
        stream: Arc<CudaStream>,
        (m, n, k): (u64, u64, u64),
        candidates: usize,
    ) -> Result<LtGemm<T>, BenchError> {
        // SAFETY: cuBLASLt writes every byte of the workspace it uses before reading it.
        let workspace = unsafe { stream.alloc::<u8>(WORKSPACE_BYTES)? };
        let element_type = data_type::<T>();
        let mut gemm = LtGemm {
            handle: lt::create_handle()?,
            desc: lt::create_matmul_desc(
                sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                sys::cudaDataType_t::CUDA_R_32F,
            )?,
            layouts: [
                lt::create_matrix_layout(element_type, m, k, m as i64)?,
                lt::create_matrix_layout(element_type, k, n, k as i64)?,
                lt::create_matrix_layout(element_type, m, n, m as i64)?,
            ],
            pref: lt::create_matmul_pref()?,
            workspace,
            stream,
            algos: Vec::new(),
            element: std::marker::PhantomData,
        };
        // SAFETY: the preference handle is live; the value is a usize as the attribute expects.
        unsafe {
            lt::set_matmul_pref_attribute(
                gemm.pref,
                sys::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                (&WORKSPACE_BYTES) as *const usize as *const c_void,
                mem::size_of::<usize>(),
            )?;
        }
        // SAFETY: the result struct is plain C data, valid when zeroed.
        let mut results: Vec<sys::cublasLtMatmulHeuristicResult_t> =
            vec![unsafe { mem::zeroed() }; candidates];
        let mut found = 0;
        let [a, b, c] = gemm.layouts;
        // SAFETY: every handle is live; `results` has room for `candidates` entries.
        unsafe {
            sys::cublasLtMatmulAlgoGetHeuristic(
                gemm.handle,
                gemm.desc,
                a,
                b,
                c,
                c,
                gemm.pref,
                candidates as i32,
                results.as_mut_ptr(),
                &mut found,
            )
            .result()?;
        }
        gemm.algos = results
            .iter()
            .take(found.max(0) as usize)
            .filter(|r| r.state == sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS)
            .map(|r| r.algo)
            .collect();
        if gemm.algos.is_empty() {
            return Err(CublasError(sys::cublasStatus_t::CUBLAS_STATUS_NOT_SUPPORTED).into());
        }
        Ok(gemm)
    }

    /// How many candidate algorithms the heuristic offered.
    pub(crate) fn candidates(&self) -> usize {
        self.algos.len()
    }

    /// Queues `d = a·b` with candidate `algo` (an index below `candidates()`).
    pub(crate) fn run(
        &self,
        algo: usize,
        a: &CudaSlice<T>,
        b: &CudaSlice<T>,
        d: &mut CudaSlice<T>,
    ) -> Result<(), BenchError> {
        let alpha = 1.0f32;
        let beta = 0.0f32;
        let (a_ptr, _a) = a.device_ptr(&self.stream);
        let (b_ptr, _b) = b.device_ptr(&self.stream);
        let (d_ptr, _d) = d.device_ptr_mut(&self.stream);
        let (w_ptr, _w) = self.workspace.device_ptr(&self.stream);
        let [a_layout, b_layout, d_layout] = self.layouts;
        // SAFETY: the buffers hold the m·k, k·n and m·n elements the layouts describe (the
        // caller allocates them from the same shape); beta = 0, so C is d itself, never read.
        unsafe {
            lt::matmul(
                self.handle,
                self.desc,
                (&alpha) as *const f32 as *const c_void,
                (&beta) as *const f32 as *const c_void,
                a_ptr as *const c_void,
                a_layout,
                b_ptr as *const c_void,
                b_layout,
                d_ptr as *const c_void,
                d_layout,
                d_ptr as *mut c_void,
                d_layout,
                &self.algos[algo],
                w_ptr as *mut c_void,
                WORKSPACE_BYTES,
                self.stream.cu_stream() as sys::cudaStream_t,
            )?;
        }
        Ok(())
    }
}

impl<T: Half> Drop for LtGemm<T> {
    fn drop(&mut self) {
        // Errors here cannot be acted on; a failed destroy leaks a handle until the process ends.
        // SAFETY: each handle was created in `new` and is destroyed once.
        unsafe {
            let _ = lt::destroy_matmul_pref(self.pref);
            for layout in self.layouts {
                let _ = lt::destroy_matrix_layout(layout);
            }
            let _ = lt::destroy_matmul_desc(self.desc);
            let _ = lt::destroy_handle(self.handle);
        }
    }
}
