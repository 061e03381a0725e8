//! The host's part: the C library and kernel the binary runs on, which processes' environment
//! and cgroup the agent can read (and so which attribution will be missing), and a profiler
//! that may hold the GPU's performance counters.

use std::path::Path;

use super::{shown, Area, Finding, Status};
use crate::attribution::procfs;
use crate::files::{self, Input};

/// The oldest glibc the shipped binaries are built for (docs/DEPLOY.md): RHEL 8's.
pub const GLIBC_FLOOR: (u32, u32) = (2, 28);

/// The C library this process runs on, `2.36`; `None` off glibc (musl) or where it does not
/// say.
pub fn glibc_version() -> Option<String> {
    #[cfg(target_env = "gnu")]
    {
        // SAFETY: gnu_get_libc_version takes nothing and returns a pointer to a static,
        // NUL-terminated string that lives as long as the process.
        let version = unsafe { std::ffi::CStr::from_ptr(libc::gnu_get_libc_version()) };
        Some(version.to_string_lossy().into_owned())
    }
    #[cfg(not(target_env = "gnu"))]
    {
        None
    }
}

/// `2.36` as (2, 36).
fn major_minor(version: &str) -> Option<(u32, u32)> {
    let mut parts = version.split('.');
    let major = parts.next()?.trim().parse().ok()?;
    let minor = parts.next()?.trim().parse().ok()?;
    Some((major, minor))
}

/// The C library, the kernel and the architecture, as facts, with a failure where the C
/// library is older than the one the binary was built for (it would not have started: this
/// is for a binary built here from source, on a host older than its builder's).
pub fn platform(proc_root: &Path) -> Vec<Finding> {
    let kernel = files::read_text(&proc_root.join("sys/kernel/osrelease"), Input::Proc)
        .map(|k| shown(k.trim()))
        .unwrap_or_else(|_| "unknown".into());
    let arch = std::env::consts::ARCH;
    let glibc = glibc_version();
    let mut findings = vec![Finding::new(
        Area::Host,
        Status::Info,
        format!(
            "glibc {}, kernel {kernel}, {arch}; gpuslack {}",
            glibc.as_deref().unwrap_or("(not glibc)"),
            env!("CARGO_PKG_VERSION")
        ),
    )];
    if let Some((major, minor)) = glibc.as_deref().and_then(major_minor) {
        if (major, minor) < GLIBC_FLOOR {
            findings.push(
                Finding::new(
                    Area::Host,
                    Status::Degraded,
                    format!(
                        "glibc {major}.{minor} is older than {}.{}, the oldest the released binaries support",
                        GLIBC_FLOOR.0, GLIBC_FLOOR.1
                    ),
                )
                .fix("run the container image, which carries its own C library"),
            );
        }
    }
    findings
}

/// What could be read of one process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Readable {
    environ: bool,
    cgroup: bool,
}

fn readable(proc_root: &Path, pid: u32) -> Option<Readable> {
    let dir = proc_root.join(pid.to_string());
    if !dir.exists() {
        return None;
    }
    // Opening is what the kernel checks (ptrace access for environ); one byte read proves it.
    let can_read = |file: &str| files::probe(&dir.join(file), Input::Proc).is_ok();
    Some(Readable {
        environ: can_read("environ"),
        cgroup: can_read("cgroup"),
    })
}

/// Every process id under `proc_root`.
fn pids(proc_root: &Path) -> std::io::Result<Vec<u32>> {
    let mut pids: Vec<u32> = std::fs::read_dir(proc_root)?
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    pids.sort_unstable();
    Ok(pids)
}

/// Whose environment and cgroup can be read: those of `gpu_pids` (the processes holding a GPU,
/// where NVML named them) else of every process. Unreadable environments lose the ranks, the
/// Slurm job and the rendezvous key; unreadable cgroups the container and the pod.
pub fn processes(proc_root: &Path, gpu_pids: &[u32]) -> Finding {
    let all = match pids(proc_root) {
        Ok(all) => all,
        Err(e) => {
            return Finding::new(
                Area::Processes,
                Status::Degraded,
                format!(
                    "{} cannot be listed ({e}): no process will be attributed to a job",
                    proc_root.display()
                ),
            )
            .fix(if is_root() {
                "mount the host's /proc (the DaemonSet runs with hostPID)"
            } else {
                "mount the host's /proc (the DaemonSet runs with hostPID) and run as root"
            });
        }
    };
    let (scope, looked_at): (&str, Vec<u32>) = if gpu_pids.is_empty() {
        ("processes", all)
    } else {
        ("processes holding a GPU", gpu_pids.to_vec())
    };
    let mut total = 0;
    let mut no_environ = Vec::new();
    let mut no_cgroup = 0;
    for pid in looked_at {
        let Some(r) = readable(proc_root, pid) else {
            continue;
        };
        total += 1;
        if !r.environ {
            no_environ.push(pid);
        }
        if !r.cgroup {
            no_cgroup += 1;
        }
    }
    if no_environ.is_empty() && no_cgroup == 0 {
        return Finding::new(
            Area::Processes,
            Status::Ok,
            format!("environment and cgroup readable for all {total} {scope}"),
        );
    }
    let some: Vec<String> = no_environ.iter().take(5).map(u32::to_string).collect();
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    let cap_eff = files::read_text(Path::new("/proc/self/status"), Input::Proc)
        .ok()
        .and_then(|s| effective_capabilities(&s));
    let (cause, fix) = denied_because(uid, cap_eff);
    Finding::new(
        Area::Processes,
        Status::Degraded,
        format!(
            "environment unreadable for {} of {total} {scope} (PIDs {}{}), cgroup for {no_cgroup}, {cause}: their ranks, Slurm job and rendezvous key (environment) and container and pod (cgroup) will be missing",
            no_environ.len(),
            some.join(", "),
            if no_environ.len() > 5 { ", …" } else { "" },
        ),
    )
    .fix(fix)
}

/// Whether the agent runs as root: a fix never asks root to become root.
pub(crate) fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// `CAP_SYS_PTRACE`'s bit: what lets a process read another user's `/proc/PID/environ`.
const CAP_SYS_PTRACE: u32 = 19;

/// The effective capability set of a `/proc/PID/status` (`CapEff:\t000001ffffffffff`).
fn effective_capabilities(status: &str) -> Option<u64> {
    let line = status.lines().find_map(|l| l.strip_prefix("CapEff:"))?;
    u64::from_str_radix(line.trim(), 16).ok()
}

/// Why other processes' environments are refused, and the fix, from who the agent is. The
/// kernel lets a process read another's environment when it owns it or holds
/// `CAP_SYS_PTRACE` over its user namespace (a ptrace read check; Yama's `ptrace_scope`
/// governs attaching, not this read). Root is refused when a container dropped the
/// capability (Docker and Kubernetes do by default), when the processes live in a user
/// namespace the agent's root does not own, or when a security module (AppArmor, SELinux)
/// denies ptrace reads: telling root to run as root helps no one.
fn denied_because(euid: u32, cap_eff: Option<u64>) -> (String, &'static str) {
    let ptrace = cap_eff.map(|caps| caps & (1 << CAP_SYS_PTRACE) != 0);
    match (euid, ptrace) {
        (0, Some(false)) => (
            "running as root but without CAP_SYS_PTRACE (a container drops it by default)".into(),
            "add CAP_SYS_PTRACE to the agent's container (Kubernetes: securityContext.capabilities.add [SYS_PTRACE]; Docker: --cap-add SYS_PTRACE); root without it cannot read other users' environments",
        ),
        (_, Some(true)) => (
            format!("running as uid {euid} with CAP_SYS_PTRACE, and still refused by the kernel"),
            "a security module denies ptrace reads (Docker's default AppArmor profile does: run with --security-opt apparmor=unconfined or a profile allowing `ptrace (read)`; SELinux: allow the agent's domain sys_ptrace), or the processes are in a user namespace the agent's does not own (run it in the host's)",
        ),
        (0, None) => (
            "running as root, and refused by the kernel (capabilities unknown)".into(),
            "give the agent CAP_SYS_PTRACE (a container drops it by default), and check that no AppArmor or SELinux profile denies ptrace reads",
        ),
        (_, _) => (
            format!("running as uid {euid}, not root"),
            "run the agent as root (the DaemonSet and the systemd unit do), or give it CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH",
        ),
    }
}

/// A profiler among the processes: by name, or by the injection library in a process's
/// environment (a job started under `ncu`/`nsys` carries it).
pub fn profiler(proc_root: &Path) -> Finding {
    let mut seen = Vec::new();
    for pid in pids(proc_root).unwrap_or_default() {
        let dir = proc_root.join(pid.to_string());
        let comm = files::read_text(&dir.join("comm"), Input::Proc).unwrap_or_default();
        let comm = comm.trim();
        // The same recognition as attribution's, which marks a GPU's processes for the
        // verdicts: here every process of the host counts, DCGM's host engine included.
        if let Some(what) = procfs::profiler_by_name(comm) {
            seen.push(format!("{what}, PID {pid}"));
            continue;
        }
        // Its head, as the attribution reads it: an environment linked to `/dev/zero` under
        // `--proc-root` took 4.2 GB read whole.
        let environ = files::read_head(&dir.join("environ"), Input::Environ)
            .map(|(head, _)| head)
            .unwrap_or_default();
        if let Some(tool) = procfs::profiler_in_environ(&environ) {
            seen.push(format!(
                "a process profiled by {tool} ({}, PID {pid})",
                shown(comm)
            ));
        }
    }
    if seen.is_empty() {
        return Finding::new(
            Area::Profiler,
            Status::Ok,
            "no profiler holds the performance counters",
        );
    }
    let count = seen.len();
    seen.truncate(3);
    Finding::new(
        Area::Profiler,
        Status::Degraded,
        format!(
            "{}{}: while it profiles, GPM reads fail or stop refreshing, and verdicts are marked low-confidence",
            seen.join(", "),
            if count > 3 { format!(" and {} more", count - 3) } else { String::new() }
        ),
    )
    .fix("let the profiling session end; for DCGM, pause profiling (`dcgmi profile --pause`) while gpuslack samples")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_proc(name: &str) -> std::path::PathBuf {
        let dir =
            std::env::temp_dir().join(format!("gpuslack-doctor-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("sys/kernel")).ok();
        dir
    }

    fn process(root: &Path, pid: u32, comm: &str, environ: &[u8]) {
        let dir = root.join(pid.to_string());
        std::fs::create_dir_all(&dir).ok();
        std::fs::write(dir.join("comm"), format!("{comm}\n")).ok();
        std::fs::write(dir.join("environ"), environ).ok();
        std::fs::write(dir.join("cgroup"), "0::/\n").ok();
    }

    #[test]
    fn root_refused_by_the_kernel_is_not_told_to_run_as_root() {
        let full = 0x1ff_ffff_ffff_u64;
        let no_ptrace = full & !(1 << CAP_SYS_PTRACE);
        let (cause, fix) = denied_because(0, Some(no_ptrace));
        assert_eq!(
            cause,
            "running as root but without CAP_SYS_PTRACE (a container drops it by default)"
        );
        assert!(fix.starts_with("add CAP_SYS_PTRACE"), "{fix}");
        assert!(!fix.contains("run the agent as root"), "{fix}");
        let (cause, fix) = denied_because(0, Some(full));
        assert!(
            cause.contains("with CAP_SYS_PTRACE, and still refused"),
            "{cause}"
        );
        assert!(
            fix.contains("AppArmor") && fix.contains("user namespace"),
            "{fix}"
        );
        assert!(!fix.contains("run the agent as root"), "{fix}");
        let (_, fix) = denied_because(0, None);
        assert!(!fix.contains("run the agent as root"), "{fix}");
        // Not root and no capability: root is the fix.
        let (cause, fix) = denied_because(1000, Some(0));
        assert_eq!(cause, "running as uid 1000, not root");
        assert!(fix.starts_with("run the agent as root"), "{fix}");
        // Not root but holding the capability: the kernel's refusal has another cause.
        let (cause, _) = denied_because(1000, Some(1 << CAP_SYS_PTRACE));
        assert!(cause.contains("with CAP_SYS_PTRACE"), "{cause}");
    }

    #[test]
    fn the_effective_capabilities_are_read_from_a_status_file() {
        let status = "Name:\tx\nCapInh:\t0000000000000000\nCapEff:\t00000000a80425fb\nCapBnd:\t1\n";
        assert_eq!(effective_capabilities(status), Some(0xa804_25fb));
        // Docker's default set: no CAP_SYS_PTRACE.
        assert_eq!(0xa804_25fb_u64 & (1 << CAP_SYS_PTRACE), 0);
        assert_eq!(effective_capabilities("Name:\tx\n"), None);
    }

    #[test]
    fn version_numbers_compare_as_numbers() {
        assert_eq!(major_minor("2.36"), Some((2, 36)));
        assert_eq!(major_minor("2.28"), Some(GLIBC_FLOOR));
        assert!(major_minor("2.9").is_some_and(|v| v < GLIBC_FLOOR));
        assert_eq!(major_minor("x"), None);
    }

    #[test]
    fn this_process_runs_on_a_glibc_at_or_above_the_floor() {
        let v = glibc_version().and_then(|v| major_minor(&v));
        assert!(v.is_some_and(|v| v >= GLIBC_FLOOR), "{v:?}");
    }

    #[test]
    fn a_profiler_is_found_by_name_and_by_its_injected_library() {
        let root = fake_proc("profiler");
        process(&root, 10, "python", b"HOME=/root\0");
        assert_eq!(profiler(&root).status, Status::Ok);
        process(
            &root,
            11,
            "python",
            b"A=1\0CUDA_INJECTION64_PATH=/opt/nsight/libinj.so\0",
        );
        process(&root, 12, "nv-hostengine", b"");
        let f = profiler(&root);
        assert_eq!(f.status, Status::Degraded);
        assert!(
            f.detail
                .contains("a process profiled by a CUDA injection library (python, PID 11)"),
            "{}",
            f.detail
        );
        assert!(f.detail.contains("DCGM's host engine"), "{}", f.detail);
        let _ = std::fs::remove_dir_all(root);
    }

    #[test]
    fn processes_are_counted_and_a_missing_proc_is_named() {
        let root = fake_proc("procs");
        process(&root, 20, "a", b"");
        process(&root, 21, "b", b"");
        let f = processes(&root, &[]);
        assert_eq!(f.status, Status::Ok);
        assert_eq!(
            f.detail,
            "environment and cgroup readable for all 2 processes"
        );
        // Only the GPU's processes count once NVML names them; one that has exited is skipped.
        let f = processes(&root, &[21, 99]);
        assert_eq!(
            f.detail,
            "environment and cgroup readable for all 1 processes holding a GPU"
        );
        let missing = root.join("absent");
        let f = processes(&missing, &[]);
        assert_eq!(f.status, Status::Degraded);
        assert!(f.detail.contains("cannot be listed"), "{}", f.detail);
        let _ = std::fs::remove_dir_all(root);
    }
}
