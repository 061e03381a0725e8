//! What we ship, as scripts/dist/build.sh writes it into the dist folder (`GPUSLACK_DIST`): the
//! binaries hold the glibc 2.28 floor (their ELF symbol versions, read with `readelf`); the
//! aarch64 build run under `qemu-aarch64` replays and scores every fixture to the byte as the
//! x86_64 build does; the wheels are what `auditwheel` calls manylinux_2_28 and install into a
//! fresh venv whose `gpuslack diagnose` runs; the .deb installs, its unit's ExecStart serves
//! /metrics for a replayed trace, and it purges leaving nothing; the container image's context
//! holds both binaries and its CMD parses.
//!
//! `scripts/test.sh` builds the dist folder first and sets GPUSLACK_DIST, GPUSLACK_QEMU_AARCH64,
//! GPUSLACK_AARCH64_SYSROOT (the aarch64 C library qemu loads) and GPUSLACK_AUDITWHEEL.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, repo, temp_dir, tool, Server};

/// The oldest glibc the shipped binaries must start on (RHEL 8, Rocky 8).
const GLIBC_FLOOR: [u32; 2] = [2, 28];

const ARCHS: [&str; 2] = ["x86_64", "aarch64"];

fn dist() -> PathBuf {
    PathBuf::from(tool("GPUSLACK_DIST"))
}

fn binary(arch: &str) -> PathBuf {
    dist().join(arch).join("gpuslack")
}

fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

fn run(cmd: &mut Command) -> Output {
    cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"))
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn run_ok(cmd: &mut Command) -> String {
    let out = run(cmd);
    assert!(out.status.success(), "{cmd:?} failed:\n{}", text(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The symbol versions a binary asks of its libraries: the `Name:` entries of readelf's
/// "Version needs section" (`.gnu.version_r`), e.g. `GLIBC_2.2.5`, `GLIBC_ABI_DT_RELR`.
fn needed_versions(readelf_v: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut inside = false;
    for line in readelf_v.lines() {
        if line.starts_with("Version needs section") {
            inside = true;
        } else if !line.starts_with(' ') && !line.is_empty() {
            inside = false;
        } else if inside {
            // "  0x0010:   Name: GLIBC_2.28  Flags: none  Version: 5"
            if let Some(rest) = line.split("Name: ").nth(1) {
                if let Some(name) = rest.split_whitespace().next() {
                    out.push(name.to_string());
                }
            }
        }
    }
    out
}

/// Why a binary needing these versions would not start on glibc 2.28, or `None`: a
/// `GLIBC_x.y[.z]` above the floor, or any `GLIBC_ABI_*` marker (`GLIBC_ABI_DT_RELR`: packed
/// relocations, glibc 2.36).
fn above_the_floor(versions: &[String]) -> Option<String> {
    for v in versions {
        if v.starts_with("GLIBC_ABI_") {
            return Some(format!("{v}: a loader feature newer than glibc 2.28"));
        }
        if let Some(number) = v.strip_prefix("GLIBC_") {
            let parts: Vec<u32> = number.split('.').filter_map(|p| p.parse().ok()).collect();
            if parts.as_slice() > GLIBC_FLOOR.as_slice() {
                return Some(format!("{v}: newer than GLIBC_2.28"));
            }
        }
    }
    None
}

fn readelf(args: &[&str], file: &Path) -> String {
    run_ok(Command::new("readelf").args(args).arg(file))
}

#[test]
fn the_floor_check_draws_its_line_at_glibc_2_28() {
    let v = |names: &[&str]| names.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(above_the_floor(&v(&["GLIBC_2.2.5", "GLIBC_2.3.4"])), None);
    assert_eq!(above_the_floor(&v(&["GLIBC_2.17", "GLIBC_2.28"])), None);
    assert!(above_the_floor(&v(&["GLIBC_2.28", "GLIBC_2.29"])).is_some());
    assert!(above_the_floor(&v(&["GLIBC_2.34"])).is_some());
    assert!(above_the_floor(&v(&["GLIBC_2.3.4", "GLIBC_ABI_DT_RELR"])).is_some());
    // Other libraries' versions are not glibc's.
    assert_eq!(above_the_floor(&v(&["GCC_3.0", "GCC_4.2.0"])), None);
    let sample = "\
Version symbols section '.gnu.version' contains 3 entries:
 Addr: 0x0000000000000a  Offset: 0x000a  Link: 4 (.dynsym)
  000:   0 (*local*)       2 (GLIBC_2.2.5)

Version needs section '.gnu.version_r' contains 2 entries:
 Addr: 0x0000000000000b  Offset: 0x000b  Link: 5 (.dynstr)
  000000: Version: 1  File: libgcc_s.so.1  Cnt: 1
  0x0010:   Name: GCC_3.0  Flags: none  Version: 3
  0x0020: Version: 1  File: libc.so.6  Cnt: 2
  0x0030:   Name: GLIBC_2.34  Flags: none  Version: 4
  0x0040:   Name: GLIBC_ABI_DT_RELR  Flags: none  Version: 2
";
    assert_eq!(
        needed_versions(sample),
        ["GCC_3.0", "GLIBC_2.34", "GLIBC_ABI_DT_RELR"]
    );
}

/// Every shipped binary starts on glibc 2.28: no symbol version above GLIBC_2.28, no
/// GLIBC_ABI_DT_RELR, no packed relocations at all; for its architecture, with its loader,
/// and with `dlopen` exported (src/no_libcuda.rs).
#[test]
fn the_shipped_binaries_need_nothing_above_glibc_2_28() {
    for (arch, machine, loader) in [
        (
            "x86_64",
            "Advanced Micro Devices X86-64",
            "/lib64/ld-linux-x86-64.so.2",
        ),
        ("aarch64", "AArch64", "/lib/ld-linux-aarch64.so.1"),
    ] {
        let bin = binary(arch);
        let versions = needed_versions(&readelf(&["-V", "-W"], &bin));
        assert!(
            versions
                .iter()
                .any(|v| v == "GLIBC_2.2.5" || v == "GLIBC_2.17"),
            "{arch}: no glibc version read: {versions:?}"
        );
        assert_eq!(above_the_floor(&versions), None, "{arch}: {versions:?}");
        let dynamic = readelf(&["-d", "-W"], &bin);
        assert!(
            !dynamic.contains("(RELR"),
            "{arch}: packed relocations:\n{dynamic}"
        );
        let header = readelf(&["-h", "-l", "-W"], &bin);
        assert!(header.contains(machine), "{arch}: {header}");
        assert!(
            header.contains(&format!("interpreter: {loader}")),
            "{arch}: {header}"
        );
        let dynsym = readelf(&["--dyn-syms", "-W"], &bin);
        assert!(
            dynsym
                .lines()
                .any(|l| l.ends_with(" dlopen") && l.contains("FUNC") && !l.contains(" UND ")),
            "{arch}: dlopen is not exported"
        );
    }
}

/// A function's name without its hashes, as build.rs matches link/symbol-order.txt in the
/// shipped build (whose hashes differ from the host build's the file was written from): the
/// legacy mangling's `17h<16 hex>E` ending dropped, v0's crate disambiguators (`Cs…_`) emptied.
fn path_of(name: &str) -> String {
    if name.starts_with("_ZN") && name.len() > 20 {
        let (head, tail) = name.split_at(name.len() - 20);
        if tail.starts_with("17h") && tail.ends_with('E') {
            return head.to_string();
        }
    }
    if !name.starts_with("_R") {
        return name.to_string();
    }
    let mut out = String::new();
    let mut rest = name;
    while let Some(i) = rest.find("Cs") {
        out.push_str(&rest[..i + 2]);
        let after = &rest[i + 2..];
        match after.find('_') {
            Some(j) if after[..j].chars().all(|c| c.is_ascii_alphanumeric()) => {
                out.push('_');
                rest = &after[j + 1..];
            }
            _ => rest = after,
        }
    }
    out.push_str(rest);
    out
}

#[test]
fn a_functions_path_is_its_name_without_hashes() {
    assert_eq!(
        path_of("_ZN5alloc7raw_vec11finish_grow17h8b6b96131ad85021E"),
        "_ZN5alloc7raw_vec11finish_grow"
    );
    assert_eq!(
        path_of("_RNvNtCsjrHSEGnQ3l9_3std2rt19lang_start_internal"),
        "_RNvNtCs_3std2rt19lang_start_internal"
    );
    assert_eq!(path_of("main"), "main");
    assert_eq!(path_of("_ZN3foo3barE"), "_ZN3foo3barE");
}

/// The shipped x86_64 build keeps the agent's functions together at the start of the code
/// (build.rs hands link/symbol-order.txt to zig's linker as a script): most names of the file
/// have their function in the binary, those functions fill the start of `.text` with almost
/// nothing else among them, and they lie in the file's order.
#[test]
fn the_shipped_x86_64_binary_keeps_the_agents_code_in_order() {
    let order = std::fs::read_to_string(repo("link/symbol-order.txt")).expect("the order file");
    let mut wanted: Vec<String> = Vec::new();
    for name in order.lines().map(str::trim) {
        if name.is_empty() || name.starts_with('#') {
            continue;
        }
        let path = path_of(name);
        if !wanted.contains(&path) {
            wanted.push(path);
        }
    }
    let nm = run_ok(
        Command::new("nm")
            .args(["--defined-only", "-S"])
            .arg(binary("x86_64")),
    );
    // Each path's lowest address, and every function's (address, path).
    let mut lowest = std::collections::HashMap::new();
    let mut functions = Vec::new();
    for line in nm.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() != 4 || !f[2].eq_ignore_ascii_case("t") {
            continue;
        }
        let Ok(address) = u64::from_str_radix(f[0], 16) else {
            continue;
        };
        let path = path_of(f[3]);
        let low = lowest.entry(path.clone()).or_insert(address);
        *low = (*low).min(address);
        functions.push((address, path));
    }
    let placed: Vec<u64> = wanted
        .iter()
        .filter_map(|p| lowest.get(p).copied())
        .collect();
    assert!(
        // 90% on 2026-12-05; names go stale with edits (scripts/device/text_order renews
        // them), and the exact names of the host build matched 6% here.
        placed.len() * 100 >= wanted.len() * 80,
        "{} of the order file's {} functions in the binary",
        placed.len(),
        wanted.len()
    );
    let in_order = placed.windows(2).filter(|w| w[0] < w[1]).count();
    assert!(
        in_order * 100 >= (placed.len() - 1) * 90,
        "{in_order} of {} in the file's order",
        placed.len()
    );
    let wanted: std::collections::HashSet<&String> = wanted.iter().collect();
    let end = functions
        .iter()
        .filter(|(_, p)| wanted.contains(p))
        .map(|(a, _)| *a)
        .max()
        .expect("ordered functions");
    let start = functions.iter().map(|(a, _)| *a).min().expect("functions");
    let among = functions
        .iter()
        .filter(|(a, p)| *a <= end && !wanted.contains(p))
        .count();
    assert_eq!(
        lowest.get(&path_of(
            order
                .lines()
                .find(|l| l.starts_with("_R"))
                .expect("a Rust name")
        )),
        Some(&start),
        "the file's first Rust function is not the first of the code"
    );
    assert!(
        among * 100 <= placed.len(),
        "{among} other functions among the ordered ones"
    );
}

/// `gpuslack ARGS` with the aarch64 build under qemu, or the x86_64 build natively.
fn shipped(arch: &str, args: &[&str]) -> Output {
    let mut cmd = if arch == "aarch64" {
        let mut c = Command::new(tool("GPUSLACK_QEMU_AARCH64"));
        c.arg("-L").arg(tool("GPUSLACK_AARCH64_SYSROOT"));
        c.arg(binary(arch));
        c
    } else {
        Command::new(binary(arch))
    };
    run(cmd.args(args).env_remove("OTEL_EXPORTER_OTLP_ENDPOINT"))
}

/// NVML is loaded at run time, so nothing GPU-specific differs between the architectures; the
/// floating point must not either: every fixture's verdicts (`replay --format jsonl`) and every
/// labelled fixture's score, from the aarch64 build under qemu, equal the x86_64 build's byte
/// for byte.
#[test]
fn the_aarch64_build_replays_and_scores_every_fixture_as_x86_64_does() {
    let mut replayed = 0;
    let mut scored = 0;
    let mut fixtures: Vec<PathBuf> = std::fs::read_dir(repo("tests/fixtures"))
        .expect("fixtures")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("samples.csv").exists())
        .collect();
    fixtures.sort();
    for dir in fixtures {
        let samples = dir.join("samples.csv").display().to_string();
        let mut runs: Vec<(Vec<String>, &str)> = vec![(
            ["replay", &samples, "--format", "jsonl"]
                .map(String::from)
                .to_vec(),
            "replay",
        )];
        if dir.join("labels.json").exists() {
            let labels = dir.join("labels.json").display().to_string();
            runs.push((
                ["score", &samples, &labels, "--json"]
                    .map(String::from)
                    .to_vec(),
                "score",
            ));
        }
        for (args, what) in runs {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let x86 = shipped("x86_64", &args);
            let arm = shipped("aarch64", &args);
            // A score under its thresholds exits 1 (the no-GPM fixture's): the same on both.
            assert!(
                x86.status.success() || what == "score",
                "{}: x86_64 {what}: {}",
                dir.display(),
                text(&x86)
            );
            assert!(
                !x86.stdout.is_empty(),
                "{}: x86_64 {what} said nothing",
                dir.display()
            );
            assert_eq!(
                x86.status.code(),
                arm.status.code(),
                "{}: {what}: {}",
                dir.display(),
                text(&arm)
            );
            assert!(
                x86.stdout == arm.stdout,
                "{}: {what}: aarch64's output differs from x86_64's ({} against {} bytes)",
                dir.display(),
                arm.stdout.len(),
                x86.stdout.len()
            );
            if what == "replay" {
                replayed += 1;
            } else {
                scored += 1;
            }
        }
    }
    assert!(
        replayed >= 9 && scored >= 5,
        "{replayed} replayed, {scored} scored"
    );
}

fn wheel(arch: &str) -> PathBuf {
    dist().join(format!(
        "gpuslack-{}-py3-none-manylinux_2_28_{arch}.whl",
        version()
    ))
}

/// `auditwheel show` reads each wheel's binary and names the manylinux_2_28 tag it was given:
/// the symbol versions allow it, and nothing outside the manylinux policy's libraries is linked.
#[test]
fn auditwheel_calls_both_wheels_manylinux_2_28() {
    for arch in ARCHS {
        let out = run_ok(
            Command::new(tool("GPUSLACK_AUDITWHEEL"))
                .arg("show")
                .arg(wheel(arch)),
        );
        let flat = out.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            flat.contains(&format!(
                "consistent with the following platform tag: \"manylinux_2_28_{arch}\""
            )),
            "{arch}: {out}"
        );
    }
}

/// The wheel as a new user meets it: `pip install` into a fresh venv, offline, then the venv's
/// `gpuslack diagnose`, which on this machine (no GPU) reports the bundled H100 recording and
/// exits 0. The installed program is the shipped binary itself.
#[test]
fn the_wheel_installs_into_a_fresh_venv_and_runs_diagnose() {
    let dir = temp_dir("wheel");
    let venv = dir.join("venv");
    run_ok(
        Command::new(tool("GPUSLACK_PYTHON"))
            .args(["-m", "venv"])
            .arg(&venv),
    );
    let started = Instant::now();
    run_ok(
        Command::new(venv.join("bin/pip"))
            .args(["install", "-q", "--no-index", "--disable-pip-version-check"])
            .arg(wheel("x86_64")),
    );
    let install_s = started.elapsed().as_secs_f64();
    let installed = venv.join("bin/gpuslack");
    assert_eq!(
        std::fs::read(&installed).expect("the venv's gpuslack"),
        std::fs::read(binary("x86_64")).expect("the shipped binary"),
        "pip installed another file than the shipped binary"
    );
    let out = run(Command::new(&installed).arg("diagnose"));
    let said = text(&out);
    assert!(out.status.success(), "{said}");
    assert!(said.contains("BUNDLED RECORDING"), "{said}");
    assert!(said.contains("h100-diagnose-job (bundled)"), "{said}");
    eprintln!("pip install of the wheel into a fresh venv: {install_s:.2} s");
}

fn as_root(program: &str) -> Command {
    // SAFETY-free: geteuid through `id -u`, which needs no unsafe block.
    let uid = run_ok(Command::new("id").arg("-u"));
    if uid.trim() == "0" {
        Command::new(program)
    } else {
        let mut c = Command::new("sudo");
        c.arg(program);
        c
    }
}

/// One unit file's `KEY=value` lines (the `[Service]` section's, among others).
fn unit_values<'a>(unit: &'a str, key: &str) -> Vec<&'a str> {
    unit.lines()
        .filter_map(|l| l.strip_prefix(key)?.strip_prefix('='))
        .collect()
}

/// An ExecStart line as systemd expands it: `${NAME}` is one word, a bare `$NAME` word
/// becomes the value's words (none when empty).
fn expand_exec(line: &str, env: &std::collections::HashMap<String, String>) -> Vec<String> {
    let mut out = Vec::new();
    for word in line.split_whitespace() {
        if let Some(name) = word.strip_prefix("${").and_then(|w| w.strip_suffix('}')) {
            out.push(env.get(name).cloned().unwrap_or_default());
        } else if let Some(name) = word.strip_prefix('$') {
            out.extend(
                env.get(name)
                    .map(|v| v.split_whitespace().map(String::from).collect::<Vec<_>>())
                    .unwrap_or_default(),
            );
        } else {
            out.push(word.to_string());
        }
    }
    out
}

/// `KEY=value` lines of an environment file, quotes taken off.
fn env_file(text: &str) -> Vec<(String, String)> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().trim_matches('"').to_string()))
        .collect()
}

#[test]
fn an_exec_line_expands_as_systemd_does() {
    let env: std::collections::HashMap<String, String> = [
        ("A", "127.0.0.1:9"),
        ("ARGS", "--replay /t.csv  --speed 0"),
        ("NONE", ""),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert_eq!(
        expand_exec("/usr/bin/gpuslack run --prometheus ${A} $NONE $ARGS", &env),
        [
            "/usr/bin/gpuslack",
            "run",
            "--prometheus",
            "127.0.0.1:9",
            "--replay",
            "/t.csv",
            "--speed",
            "0"
        ]
    );
    assert_eq!(
        env_file("# c\nA=1\n B = \"x y\" \n"),
        [
            ("A".to_string(), "1".to_string()),
            ("B".to_string(), "x y".to_string())
        ]
    );
}

/// The .deb as an SRE meets it: `dpkg -i`, the unit started with `--replay` of a fixture and
/// /metrics scraped, then `dpkg --purge` and nothing of it left. systemd is not PID 1 on the
/// machines CI runs on, so the unit's ExecStart is run as systemd would run it: from the
/// installed unit file, its `Environment=` and `EnvironmentFile=` applied (the replay and the
/// address given in the installed /etc/gpuslack/gpuslack.env, as an admin would), as an
/// unprivileged user (the unit's DynamicUser=yes), stopped with SIGTERM.
#[test]
fn the_deb_installs_serves_metrics_from_its_unit_and_purges_cleanly() {
    let deb = dist().join(format!("gpuslack_{}_amd64.deb", version()));
    let dpkg = |args: &[&str]| run(as_root("dpkg").args(args));
    // A package left by an earlier, interrupted run goes first.
    let _ = dpkg(&["--purge", "gpuslack"]);
    let started = Instant::now();
    let out = dpkg(&["-i", &deb.display().to_string()]);
    let install_s = started.elapsed().as_secs_f64();
    assert!(out.status.success(), "dpkg -i: {}", text(&out));
    let listed = run_ok(Command::new("dpkg").args(["-L", "gpuslack"]));
    let files: Vec<&str> = listed.lines().filter(|l| Path::new(l).is_file()).collect();
    for want in [
        "/usr/bin/gpuslack",
        "/usr/lib/systemd/system/gpuslack.service",
        "/usr/lib/systemd/system/gpuslack-healthcheck.service",
        "/usr/lib/systemd/system/gpuslack-healthcheck.timer",
        "/etc/gpuslack/gpuslack.toml",
        "/etc/gpuslack/gpuslack.env",
    ] {
        assert!(files.contains(&want), "{want} not installed:\n{listed}");
    }
    assert_eq!(
        std::fs::read("/usr/bin/gpuslack").expect("installed"),
        std::fs::read(binary("x86_64")).expect("shipped"),
        "the package holds another binary than the shipped one"
    );
    let conffiles = run_ok(Command::new("dpkg-query").args(["-W", "-f=${Conffiles}", "gpuslack"]));
    assert!(
        conffiles.contains("/etc/gpuslack/gpuslack.toml")
            && conffiles.contains("/etc/gpuslack/gpuslack.env"),
        "{conffiles}"
    );

    // The admin's edit: the replay, and an address of the test's own.
    let dir = temp_dir("deb");
    let trace = dir.join("samples.csv");
    std::fs::copy(repo("tests/fixtures/h200-health/samples.csv"), &trace).expect("trace");
    std::fs::copy(
        repo("tests/fixtures/h200-health/samples.facts.json"),
        dir.join("samples.facts.json"),
    )
    .expect("facts");
    for p in [&dir, &trace, &dir.join("samples.facts.json")] {
        run_ok(Command::new("chmod").arg("a+rX").arg(p));
    }
    let port = free_port();
    let env_path = "/etc/gpuslack/gpuslack.env";
    let mut shipped_env = std::fs::read_to_string(env_path).expect("the installed env file");
    shipped_env.push_str(&format!(
        "GPUSLACK_PROMETHEUS_LISTEN=127.0.0.1:{port}\nGPUSLACK_ARGS=--replay {} --speed 0 --linger-s 30\n",
        trace.display()
    ));
    std::fs::write(env_path, &shipped_env).expect("edit the env file");

    let unit = std::fs::read_to_string("/usr/lib/systemd/system/gpuslack.service").expect("unit");
    let mut env = std::collections::HashMap::new();
    for assignment in unit_values(&unit, "Environment") {
        let (k, v) = assignment.split_once('=').expect("Environment=K=V");
        env.insert(k.to_string(), v.to_string());
    }
    let files_read = unit_values(&unit, "EnvironmentFile");
    assert_eq!(files_read, ["-/etc/gpuslack/gpuslack.env"]);
    env.extend(env_file(&shipped_env));
    let exec = unit_values(&unit, "ExecStart");
    assert_eq!(exec.len(), 1, "{unit}");
    let argv = expand_exec(exec[0], &env);
    assert_eq!(argv[0], "/usr/bin/gpuslack", "{argv:?}");
    assert!(
        argv.contains(&"--config".to_string())
            && argv.contains(&"/etc/gpuslack/gpuslack.toml".to_string())
    );
    // DynamicUser=yes: an unprivileged user, here nobody.
    let mut cmd = as_root("setpriv");
    cmd.args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"])
        .args(&argv)
        .env_clear()
        .envs(env.iter())
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut agent = Server(cmd.spawn().expect("the unit's ExecStart starts"));
    common::wait_for_port(port, "the packaged agent");
    let scrape = |path: &str| {
        let out = run(Command::new("curl").args(["-s", &format!("http://127.0.0.1:{port}{path}")]));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let waited = Instant::now();
    let mut metrics = scrape("/metrics");
    while !metrics.contains("gpuslack_diagnosis_ratio")
        && waited.elapsed() < Duration::from_secs(15)
    {
        std::thread::sleep(Duration::from_millis(200));
        metrics = scrape("/metrics");
    }
    assert!(metrics.contains("gpuslack_diagnosis_ratio{"), "{metrics}");
    assert!(
        metrics.contains("service_name=\"gpuslack\""),
        "the default config's resource"
    );
    // systemctl stop: SIGTERM, then the agent flushes and exits 0 within TimeoutStopSec.
    run_ok(Command::new("kill").args(["-TERM", &agent.0.id().to_string()]));
    let status = agent.0.wait().expect("the agent exits");
    assert!(status.success(), "{status:?}");

    let out = dpkg(&["--purge", "gpuslack"]);
    assert!(out.status.success(), "dpkg --purge: {}", text(&out));
    for file in &files {
        assert!(
            !Path::new(file).exists(),
            "{file} left behind after --purge"
        );
    }
    assert!(
        !Path::new("/etc/gpuslack").exists(),
        "/etc/gpuslack left behind"
    );
    let status = run(Command::new("dpkg-query").args(["-W", "-f=${Status}", "gpuslack"]));
    assert!(
        !status.status.success() || !String::from_utf8_lossy(&status.stdout).contains("installed"),
        "{}",
        text(&status)
    );
    eprintln!("dpkg -i of the .deb: {install_s:.2} s");
}

/// The image's context as scripts/dist/build.sh leaves it (no container engine on CI's
/// machines to build it; tests/deploy.rs checks the Dockerfile itself): both architectures'
/// shipped binaries where `COPY ${TARGETARCH}/gpuslack` looks, and the image's ENTRYPOINT and
/// CMD run with the amd64 one: no GPU here, so exit 69 (2 would be a usage error), and with a
/// replay in place of the GPU, /metrics on loopback only.
#[test]
fn the_image_context_holds_both_builds_and_its_cmd_runs() {
    for (arch, docker_arch) in [("x86_64", "amd64"), ("aarch64", "arm64")] {
        let in_context = dist().join("image").join(docker_arch).join("gpuslack");
        assert_eq!(
            std::fs::read(&in_context).expect("the image context's binary"),
            std::fs::read(binary(arch)).expect("shipped"),
            "{docker_arch}"
        );
    }
    let dockerfile =
        std::fs::read_to_string(repo("deploy/container/Dockerfile")).expect("Dockerfile");
    let cmd: Vec<String> = dockerfile
        .lines()
        .find_map(|l| l.strip_prefix("CMD "))
        .map(|l| serde_json::from_str(l).expect("CMD is a JSON array"))
        .expect("a CMD");
    let out = run(Command::new(binary("x86_64"))
        .args(&cmd)
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT"));
    assert_eq!(out.status.code(), Some(69), "{}", text(&out));
    let port = free_port();
    let cmd: Vec<String> = cmd
        .iter()
        .map(|a| a.replace(":9464", &format!(":{port}")))
        .collect();
    let fixture = repo("tests/fixtures/h200-health/samples.csv")
        .display()
        .to_string();
    let _agent = Server(
        Command::new(binary("x86_64"))
            .args(&cmd)
            .args(["--replay", &fixture, "--speed", "0", "--linger-s", "20"])
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("the image's command starts"),
    );
    common::wait_for_port(port, "the image's command");
    assert_eq!(listening_on(port), ["127.0.0.1"]);
}

/// The IPv4 addresses listening on `port`, from /proc/net/tcp (`0100007F:1F40 … 0A`: the
/// address in host byte order, then the port, state 0A for LISTEN), and any IPv6 listener's
/// address in /proc/net/tcp6's hex, bracketed.
fn listening_on(port: u16) -> Vec<String> {
    let mut out = Vec::new();
    for (file, v6) in [("/proc/net/tcp", false), ("/proc/net/tcp6", true)] {
        let table = std::fs::read_to_string(file).unwrap_or_default();
        for line in table.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (Some(local), Some(state)) = (f.get(1), f.get(3)) else {
                continue;
            };
            let Some((addr, p)) = local.split_once(':') else {
                continue;
            };
            if *state != "0A" || u16::from_str_radix(p, 16).ok() != Some(port) {
                continue;
            }
            if v6 {
                out.push(format!("[{addr}]"));
            } else if let Ok(a) = u32::from_str_radix(addr, 16) {
                out.push(std::net::Ipv4Addr::from(a.swap_bytes()).to_string());
            }
        }
    }
    out
}
