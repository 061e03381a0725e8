//! Keeps libcuda out of the commands that only sample (`diagnose`, `run`, `record`).
//!
//! `nvmlInit` loads libcuda.so.1 although nothing gpuslack reads needs it: on driver 580 every
//! field, GPM included, reads the same without it, and it costs the agent 4 MiB of resident
//! memory, a sixth of its footprint (docs/benchmarks.md). NVML is meant to work without it:
//! containers given only the `utility` driver capability have libnvidia-ml and no libcuda.
//! NVML has no option to skip it, so this executable defines `dlopen` itself. The dynamic
//! linker binds NVML's call to this definition (build.rs exports it), which refuses libcuda
//! once a command has said it will not use CUDA, and hands every other request to the C
//! library's `dlopen`. `bench` and `calibrate` never say so: they load libcuda as usual.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

static REFUSE_LIBCUDA: AtomicBool = AtomicBool::new(false);

/// From now on this process will not use CUDA: libcuda is not loaded for anyone.
pub fn refuse() {
    REFUSE_LIBCUDA.store(true, Ordering::Relaxed);
}

type DlopenFn = unsafe extern "C" fn(*const c_char, c_int) -> *mut c_void;

/// The C library's `dlopen`, the next definition after this executable's.
fn next_dlopen() -> Option<DlopenFn> {
    static NEXT: OnceLock<Option<DlopenFn>> = OnceLock::new();
    *NEXT.get_or_init(|| {
        // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name only looks a symbol up.
        let symbol = unsafe { libc::dlsym(libc::RTLD_NEXT, c"dlopen".as_ptr()) };
        // SAFETY: the symbol found is the C library's dlopen, whose type is DlopenFn.
        (!symbol.is_null()).then(|| unsafe { std::mem::transmute::<*mut c_void, DlopenFn>(symbol) })
    })
}

/// `libcuda.so`, `libcuda.so.1` or a versioned file of it, by any path; not libcudart & co.
fn is_libcuda(file: &[u8]) -> bool {
    let name = file.rsplit(|&b| b == b'/').next().unwrap_or(file);
    name.starts_with(b"libcuda.so")
}

/// The `dlopen` every library in this process calls. Returning null is how `dlopen` says a
/// library is not there; NVML takes it so.
///
/// # Safety
/// As for the C library's `dlopen`: `file` is null or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn dlopen(file: *const c_char, flags: c_int) -> *mut c_void {
    // SAFETY: the caller passes null or a NUL-terminated string, as dlopen requires.
    if REFUSE_LIBCUDA.load(Ordering::Relaxed)
        && !file.is_null()
        && is_libcuda(unsafe { CStr::from_ptr(file) }.to_bytes())
    {
        return std::ptr::null_mut();
    }
    match next_dlopen() {
        // SAFETY: the same arguments to the function this one stands in for.
        Some(real) => unsafe { real(file, flags) },
        None => std::ptr::null_mut(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_driver_library_is_refused() {
        for cuda in [
            &b"libcuda.so.1"[..],
            b"libcuda.so",
            b"/usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04",
        ] {
            assert!(is_libcuda(cuda), "{}", String::from_utf8_lossy(cuda));
        }
        for other in [
            &b"libcudart.so.13"[..],
            b"libnvidia-ml.so.1",
            b"/opt/libcuda/libnvrtc.so",
            b"",
        ] {
            assert!(!is_libcuda(other), "{}", String::from_utf8_lossy(other));
        }
    }

    #[test]
    fn other_libraries_still_load_after_refusing() {
        refuse();
        // SAFETY: NUL-terminated names.
        let libc_handle = unsafe { dlopen(c"libc.so.6".as_ptr(), libc::RTLD_NOW) };
        assert!(!libc_handle.is_null());
        let cuda = unsafe { dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW) };
        assert!(cuda.is_null());
    }
}
