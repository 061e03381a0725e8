//! Exports this executable's `dlopen` (src/no_libcuda.rs) so that the libraries it loads at run
//! time, NVML among them, call it rather than the C library's.
fn main() {
    println!("cargo:rustc-link-arg-bins=-Wl,--export-dynamic-symbol=dlopen");
}
