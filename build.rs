//! Link arguments for the `gpuslack` executable: `dlopen` exported (src/no_libcuda.rs), and in a
//! release build the agent's functions placed side by side (docs/benchmarks.md, "Live source
//! overhead"), said to whichever of the two linkers the build uses in the words it takes.
//!
//! The binaries we ship are linked by `scripts/dist/build.sh` through `cargo zigbuild` against
//! glibc 2.28's symbols (RHEL 8; tests/dist.rs holds that floor): zig's linker driver takes a
//! linker script where LLD takes `--symbol-ordering-file`. A plain `cargo build` links with
//! Rust's own LLD against the build host's C library, and the binary asks for that host's
//! symbol versions: a release build on a newer glibc than 2.28 says so in a warning.
//!
//! Relative relocations are not packed (`-z pack-relative-relocs`, DT_RELR): the binary would
//! then need glibc 2.36 (`GLIBC_ABI_DT_RELR`), which Ubuntu 22.04, RHEL 8 and 9 lack, and the
//! loader refuses it before `main`. That costs the agent ~0.3 MiB of resident memory and the
//! file 430 KiB (docs/benchmarks.md). A build for hosts known to have glibc 2.36 may add it
//! back: `RUSTFLAGS="-C link-arg=-Wl,-z,pack-relative-relocs" cargo build --release`.
use std::env;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

const SYMBOL_ORDER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/link/symbol-order.txt");
/// The oldest glibc the shipped binaries run on (scripts/dist/build.sh, tests/dist.rs).
const GLIBC_FLOOR: (u32, u32) = (2, 28);

/// Who links the executable.
#[derive(PartialEq)]
enum Linker {
    /// Rust's own LLD, the default on x86_64 Linux since 1.90: takes LLD's arguments.
    RustLld,
    /// `zig cc` as `cargo zigbuild` sets it: LLD underneath, but its driver passes only the
    /// arguments it knows (`--export`, `-T`), not `--symbol-ordering-file`.
    Zig,
    /// A C compiler driver of the build's choosing (GNU ld or another): `dlopen`'s export only.
    Other,
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed={SYMBOL_ORDER}");
    let target = env::var("TARGET").unwrap_or_default();
    let linker_env = format!(
        "CARGO_TARGET_{}_LINKER",
        target.to_uppercase().replace(['-', '.'], "_")
    );
    println!("cargo:rerun-if-env-changed={linker_env}");
    let linker = linker(&target, &linker_env);
    // Exports this executable's `dlopen` (src/no_libcuda.rs) so that the libraries it loads at
    // run time, NVML among them, call it rather than the C library's.
    if linker == Linker::Zig {
        println!("cargo:rustc-link-arg-bins=-Wl,--export=dlopen");
    } else {
        println!("cargo:rustc-link-arg-bins=-Wl,--export-dynamic-symbol=dlopen");
    }
    let release = env::var("PROFILE").as_deref() == Ok("release");
    if release && linker != Linker::Zig {
        warn_about_the_hosts_glibc(&target);
    }
    if !release || !Path::new(SYMBOL_ORDER).exists() {
        return;
    }
    // Places the functions the agent runs side by side at the start of the code. Scattered
    // over 6.4 MiB, they kept 2.8 MiB of it resident: the kernel maps code in 64 KiB blocks
    // around each page touched. The names come from a release build (a debug build's differ),
    // and a name the code no longer has is skipped, so a stale file costs memory, not
    // correctness: scripts/device/text_order regenerates it.
    match linker {
        Linker::RustLld => {
            println!("cargo:rustc-link-arg-bins=-Wl,--symbol-ordering-file={SYMBOL_ORDER}");
            println!("cargo:rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
        }
        Linker::Zig => match ordering_script() {
            Ok(script) => println!("cargo:rustc-link-arg-bins=-Wl,-T,{}", script.display()),
            Err(e) => println!("cargo:warning=the agent's code is not ordered: {e} (build.rs)"),
        },
        Linker::Other => println!(
            "cargo:warning=a linker of the build's own choosing: the agent's code is not \
             ordered and its memory is ~2 MiB higher (build.rs)"
        ),
    }
}

/// Which linker the build uses: zig where `cargo zigbuild` set the target's linker to its
/// wrapper, Rust's LLD where nothing chose one (by `-C linker=…`, `-C linker-features=…` or
/// `-C link-self-contained=…` in the flags, or a linker set for the target in the
/// environment) on the one target where it is the default.
fn linker(target: &str, linker_env: &str) -> Linker {
    let chosen = env::var(linker_env).ok();
    if chosen.as_deref().is_some_and(|l| l.contains("zigcc")) {
        return Linker::Zig;
    }
    let flags = env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    let chooses_linker = flags
        .split('\x1f')
        .any(|flag| flag.contains("linker") || flag.contains("link-self-contained"));
    if target == "x86_64-unknown-linux-gnu" && !chooses_linker && chosen.is_none() {
        Linker::RustLld
    } else {
        Linker::Other
    }
}

/// link/symbol-order.txt as a linker script for zig's driver: each function's own section
/// (`.text.NAME`, or `.text.unlikely.NAME` for a cold one: rustc and the cc crate compile one
/// section per function) in the file's order at the start of `.text`, then everything else. `INSERT AFTER` keeps the linker's default
/// layout for every other section.
fn ordering_script() -> Result<PathBuf, String> {
    let names =
        std::fs::read_to_string(SYMBOL_ORDER).map_err(|e| format!("{SYMBOL_ORDER}: {e}"))?;
    let mut script = String::from("SECTIONS {\n  .text : {\n");
    for name in names.lines().map(str::trim) {
        // A name with a glob character would match sections it does not name.
        if name.is_empty() || name.starts_with('#') || name.contains(['*', '?', '[', ' ']) {
            continue;
        }
        // LLVM puts a cold function (`#[cold]`: RawVec::grow_one, the panic paths) in
        // `.text.unlikely.NAME`; LLD's ordering file follows the symbol, a script the section.
        let name = without_hashes(name);
        let _ = writeln!(script, "    *(.text.{name} .text.unlikely.{name})");
    }
    script.push_str("    *(.text .text.*)\n  }\n} INSERT AFTER .eh_frame;\n");
    let out = PathBuf::from(env::var("OUT_DIR").map_err(|e| format!("OUT_DIR: {e}"))?);
    let path = out.join("symbol-order.ld");
    std::fs::write(&path, script).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path)
}

/// A symbol name with its hashes as globs: the legacy mangling's `17h<16 hex digits>E` ending
/// and v0's crate disambiguators (`Cs<base-62>_`). The file's names come from a build for the
/// host, whose hashes differ from a build with `--target` (the shipped one: cargo hashes the
/// target into each crate's metadata); by path alone they still find their functions.
fn without_hashes(name: &str) -> String {
    let mut out = name.to_string();
    if name.starts_with("_ZN") && name.len() > 20 {
        let (head, tail) = name.split_at(name.len() - 20);
        if tail.starts_with("17h") && tail.ends_with('E') {
            out = format!("{head}17h*E");
        }
    } else if name.starts_with("_R") {
        let mut rest = name;
        out.clear();
        while let Some(i) = rest.find("Cs") {
            out.push_str(&rest[..i + 2]);
            let after = &rest[i + 2..];
            match after.find('_') {
                Some(j) if after[..j].chars().all(|c| c.is_ascii_alphanumeric()) => {
                    out.push_str("*_");
                    rest = &after[j + 1..];
                }
                _ => rest = after,
            }
        }
        out.push_str(rest);
    }
    out
}

/// A release build linked against the build host's own C library runs only where glibc is at
/// least as new as the symbols it took from it: said once per build where that host's glibc is
/// newer than the floor the shipped binaries keep.
fn warn_about_the_hosts_glibc(target: &str) {
    if env::var("HOST").as_deref() != Ok(target) {
        return;
    }
    let Ok(out) = Command::new("getconf").arg("GNU_LIBC_VERSION").output() else {
        return;
    };
    // "glibc 2.36"
    let text = String::from_utf8_lossy(&out.stdout);
    let Some(version) = text.split_whitespace().nth(1) else {
        return;
    };
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let host = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    if host > GLIBC_FLOOR {
        println!(
            "cargo:warning=linked against this host's glibc {version}: the binary may not \
             start where glibc is older (RHEL 8 has 2.28, RHEL 9 2.34, Ubuntu 22.04 2.35); \
             scripts/dist/build.sh builds for glibc {}.{} and later",
            GLIBC_FLOOR.0, GLIBC_FLOOR.1
        );
    }
}
