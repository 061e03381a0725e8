//! Link arguments for the `gpuslack` executable. Two of them keep the agent's resident memory
//! down (docs/benchmarks.md, "Live source overhead"); both need LLD, Rust's default linker on
//! x86_64 Linux since 1.90, so they are given there only, and not where the build picks a
//! linker of its own.
use std::env;
use std::path::Path;

const SYMBOL_ORDER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/link/symbol-order.txt");
const LINKER_ENV: &str = "CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed={LINKER_ENV}");
    // Exports this executable's `dlopen` (src/no_libcuda.rs) so that the libraries it loads at
    // run time, NVML among them, call it rather than the C library's.
    println!("cargo:rustc-link-arg-bins=-Wl,--export-dynamic-symbol=dlopen");
    if env::var("TARGET").as_deref() != Ok("x86_64-unknown-linux-gnu") {
        return;
    }
    if !links_with_rusts_lld() {
        println!(
            "cargo:warning=a linker of the build's own choosing: the agent's code is not packed \
             and its memory is ~2 MiB higher (build.rs)"
        );
        return;
    }
    // Packs the ~18,000 relative relocations of a position-independent executable into a few
    // KiB (DT_RELR, glibc 2.36+) instead of a 430 KiB table the loader reads at every start.
    println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    // Places the functions the agent runs side by side at the start of the code. Scattered
    // over 6.4 MiB, they kept 2.8 MiB of it resident: the kernel maps code in 64 KiB blocks
    // around each page touched. The names come from a release build (a debug build's differ),
    // and a name the code no longer has is skipped, so a stale file costs memory, not
    // correctness: scripts/device/text_order regenerates it.
    println!("cargo:rerun-if-changed={SYMBOL_ORDER}");
    if env::var("PROFILE").as_deref() == Ok("release") && Path::new(SYMBOL_ORDER).exists() {
        println!("cargo:rustc-link-arg-bins=-Wl,--symbol-ordering-file={SYMBOL_ORDER}");
        println!("cargo:rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
    }
}

/// Whether rustc links with its own LLD, as it does on this target unless told otherwise: by
/// `-C linker=…`, `-C linker-features=…` or `-C link-self-contained=…` in the flags, or by a
/// linker set for the target in the environment.
fn links_with_rusts_lld() -> bool {
    let flags = env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    let chooses_linker = flags
        .split('\x1f')
        .any(|flag| flag.contains("linker") || flag.contains("link-self-contained"));
    !chooses_linker && env::var_os(LINKER_ENV).is_none()
}
