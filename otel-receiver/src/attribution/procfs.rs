//! What the host knows of a process holding a GPU, from `/proc` (any root, so that tests read
//! recorded samples): its executable, user, process group, CPU time and each thread's, and its
//! cgroup. CPU use is a rate, so [`CpuMeter`] keeps the last reading of each process.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use super::cgroup::{self, CgroupOwner};
use crate::files::{self, Input};
use crate::sample::JobIdentity;

/// The most of a process's `environ` read: the variables a launcher sets come first or early,
/// and an environment can be megabytes (a shell's exported functions, a conda activation), so
/// the read is bounded and a variable cut at the bound is dropped rather than half-read.
pub const ENVIRON_MAX_BYTES: u64 = Input::Environ.cap_bytes();

/// Clock ticks per second of `/proc/*/stat` times (`sysconf(_SC_CLK_TCK)`, 100 on Linux).
const TICKS_PER_S: f64 = 100.0;

/// One reading of one process.
#[derive(Debug, Clone, PartialEq)]
pub struct HostProcess {
    pub pid: u32,
    pub name: String,
    pub user: Option<String>,
    pub ppid: u32,
    pub pgid: u32,
    /// user + system CPU time (s), all threads.
    pub cpu_s: f64,
    /// Each thread's CPU time (s) by thread ID, where the threads were read: a PyTorch process
    /// has dozens, and reading them all is most of what attribution costs.
    pub threads: Option<HashMap<u32, f64>>,
    pub owner: CgroupOwner,
    /// When the process started (clock ticks since boot, `stat`'s 22nd field): with the PID,
    /// what tells a process from a later one that reuses its PID.
    pub start_ticks: u64,
}

/// What a process's environment says: its job's identity, `SLURM_JOB_ID` (the job where the
/// cgroup does not name it: Slurm without its cgroup plugin, or a container that hides the
/// host's cgroup path), and a profiler attached to it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Environ {
    pub identity: JobIdentity,
    pub slurm_job: Option<String>,
    /// The profiler the environment shows ([`profiler_in_environ`]).
    pub profiler: Option<String>,
}

/// The job identity in a `/proc/PID/environ` text (NUL-separated `KEY=value`), `SLURM_JOB_ID`
/// and a profiler. Values that are not UTF-8, or ranks that are not numbers, are left out.
pub fn parse_environ(environ: &[u8]) -> Environ {
    let mut id = JobIdentity::default();
    let mut slurm_job = None;
    let (mut master_addr, mut master_port, mut run_id) = (None, None, None);
    for var in environ.split(|b| *b == 0) {
        let Ok(var) = std::str::from_utf8(var) else {
            continue;
        };
        let Some((key, value)) = var.split_once('=') else {
            continue;
        };
        let value = value.trim();
        if value.is_empty() {
            continue;
        }
        let text = || Some(value.to_string());
        match key {
            "RANK" => id.rank = value.parse().ok(),
            "LOCAL_RANK" => id.local_rank = value.parse().ok(),
            "WORLD_SIZE" => id.world_size = value.parse().ok(),
            "MASTER_ADDR" => master_addr = text(),
            "MASTER_PORT" => master_port = text(),
            // torchrun's default run id is "none": not a key that tells jobs apart.
            "TORCHELASTIC_RUN_ID" if value != "none" => run_id = text(),
            "SLURM_JOB_ID" => slurm_job = text(),
            "SLURM_STEP_ID" => id.slurm_step = text(),
            "SLURM_ARRAY_TASK_ID" => id.slurm_array_task = text(),
            "SLURM_JOB_USER" => id.slurm_user = text(),
            "SLURM_JOB_ACCOUNT" => id.slurm_account = text(),
            "SLURM_JOB_PARTITION" => id.slurm_partition = text(),
            _ => {}
        }
    }
    id.job_key = run_id.or_else(|| {
        master_addr
            .zip(master_port)
            .map(|(addr, port)| format!("{addr}:{port}"))
    });
    Environ {
        identity: id,
        slurm_job,
        profiler: profiler_in_environ(environ),
    }
}

/// Nsight Compute, as a profiler is named in the trace and the verdict's reason.
pub const NSIGHT_COMPUTE: &str = "Nsight Compute (ncu)";
/// Nsight Systems.
pub const NSIGHT_SYSTEMS: &str = "Nsight Systems (nsys)";
/// A CUPTI tool the injection path does not name (a vendor's tracer, a homegrown one).
pub const CUDA_INJECTION: &str = "a CUDA injection library";
/// The legacy command-line profiler's variables (`nvprof`, the Visual Profiler).
pub const COMPUTE_PROFILER: &str = "a CUDA profiler (NV_COMPUTE_PROFILER_*)";

/// The variable the CUDA driver reads to load a profiling tool into a process: Nsight Compute
/// and Nsight Systems set it in the process they launch, as does any CUPTI injection tool.
pub const INJECTION_VARIABLE: &str = "CUDA_INJECTION64_PATH";

/// The profiler a process's environment shows, by what each tool sets in the process it
/// launches: `CUDA_INJECTION64_PATH` (its path names the tool: `…/nsight-compute-2024.1/…` or
/// a `ncu` directory, `…/nsight-systems-…/` or `nsys`; any other path is a CUDA injection
/// library), `NSYS_*` (Nsight Systems' session variables, `NSYS_PROFILING_SESSION_ID`), or
/// `NV_COMPUTE_PROFILER_*`. Empty values mean nothing is attached. The tool the path names
/// wins; a generic path with `NSYS_*` beside it is Nsight Systems'.
pub fn profiler_in_environ(environ: &[u8]) -> Option<String> {
    let (mut injection, mut nsys, mut legacy) = (None, false, false);
    for var in environ.split(|b| *b == 0) {
        let Ok(var) = std::str::from_utf8(var) else {
            continue;
        };
        let Some((key, value)) = var.split_once('=') else {
            continue;
        };
        if value.trim().is_empty() {
            continue;
        }
        if key == INJECTION_VARIABLE {
            injection = Some(injected_tool(value));
        } else if key.starts_with("NSYS_") {
            nsys = true;
        } else if key.starts_with("NV_COMPUTE_PROFILER_") {
            legacy = true;
        }
    }
    let named = injection.filter(|tool| *tool != CUDA_INJECTION);
    named
        .or(nsys.then_some(NSIGHT_SYSTEMS))
        .or(injection)
        .or(legacy.then_some(COMPUTE_PROFILER))
        .map(String::from)
}

/// The tool an injection library's path names: by its install directory (`nsight-compute`,
/// `nsight-systems`, with or without a version) or a path component called `ncu` or `nsys`.
fn injected_tool(path: &str) -> &'static str {
    let path = path.to_ascii_lowercase();
    let component = |tool: &str| {
        path.split('/')
            .any(|c| c == tool || c.starts_with(&format!("{tool}-")))
    };
    if path.contains("nsight-compute") || component("ncu") {
        NSIGHT_COMPUTE
    } else if path.contains("nsight-systems") || component("nsys") {
        NSIGHT_SYSTEMS
    } else {
        CUDA_INJECTION
    }
}

/// The profiler a process is, by its executable's name (`comm`, cut by the kernel at 15
/// characters): a profiler that holds a CUDA context itself (`ncu`, `nsys`, DCGM's profiling
/// tester) shows among a GPU's processes. DCGM's host engine takes the counters without one,
/// so NVML's list of a GPU's processes rarely holds it: `gpuslack doctor` looks for it among
/// all the host's processes.
pub fn profiler_by_name(name: &str) -> Option<&'static str> {
    match name {
        "ncu" => Some(NSIGHT_COMPUTE),
        "nsys" => Some(NSIGHT_SYSTEMS),
        "nv-hostengine" => Some("DCGM's host engine (nv-hostengine)"),
        "nvidia-dcgm" => Some("DCGM (nvidia-dcgm)"),
        _ if name.starts_with("dcgmproftester") => Some("DCGM's profiling tester (dcgmproftester)"),
        _ => None,
    }
}

/// Whether an unreadable `environ` was logged: once per agent, since another user's processes
/// stay unreadable to an unprivileged agent on every read of every window.
static ENVIRON_DENIED_LOGGED: AtomicBool = AtomicBool::new(false);

/// The fields of a `stat` line after the command (which may hold spaces and parentheses).
fn stat_fields(text: &str) -> Option<(String, Vec<&str>)> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let name = text.get(open + 1..close)?.to_string();
    let rest: Vec<&str> = text.get(close + 2..)?.split_whitespace().collect();
    Some((name, rest))
}

/// (name, ppid, pgid, utime + stime in s) from a `stat` line.
pub fn parse_stat(text: &str) -> Option<(String, u32, u32, f64)> {
    let (name, f) = stat_fields(text)?;
    // After the command: state(0) ppid(1) pgrp(2) session(3) … utime(11) stime(12).
    let ppid = f.get(1)?.parse().ok()?;
    let pgid = f.get(2)?.parse().ok()?;
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    Some((name, ppid, pgid, ticks / TICKS_PER_S))
}

/// The start time of a `stat` line (clock ticks since boot).
pub fn parse_start_ticks(text: &str) -> Option<u64> {
    // After the command, starttime is the 20th field (the 22nd of the line).
    stat_fields(text)?.1.get(19)?.parse().ok()
}

/// The real uid of a `status` file.
pub fn parse_uid(status: &str) -> Option<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|uid| uid.parse().ok())
}

/// The user name of `uid` in a passwd file's text.
pub fn user_name(passwd: &str, uid: u32) -> Option<String> {
    passwd.lines().find_map(|l| {
        let mut f = l.split(':');
        let name = f.next()?;
        let id: u32 = f.nth(1)?.parse().ok()?;
        (id == uid).then(|| name.to_string())
    })
}

/// Reads `/proc`-shaped data under a root: `/proc` itself, or a recorded copy.
#[derive(Debug, Clone)]
pub struct Procfs {
    root: PathBuf,
    passwd: Option<String>,
}

impl Procfs {
    pub fn new(root: impl Into<PathBuf>, passwd_file: &Path) -> Procfs {
        Procfs {
            root: root.into(),
            passwd: files::read_text(passwd_file, Input::Proc).ok(),
        }
    }

    /// The live system.
    pub fn system() -> Procfs {
        Procfs::new("/proc", Path::new("/etc/passwd"))
    }

    fn read(&self, pid: u32, file: &str) -> Option<String> {
        // Bounded, regular files only: a recorded root's file may be a link to `/dev/zero`.
        files::read_text(&self.root.join(pid.to_string()).join(file), Input::Proc).ok()
    }

    /// One reading of `pid`, its threads too if `with_threads`; `None` when it is gone or not
    /// visible (another PID namespace).
    pub fn process(&self, pid: u32, with_threads: bool) -> Option<HostProcess> {
        let stat = self.read(pid, "stat")?;
        let (name, ppid, pgid, cpu_s) = parse_stat(&stat)?;
        let user = self
            .read(pid, "status")
            .and_then(|s| parse_uid(&s))
            .and_then(|uid| {
                self.passwd
                    .as_deref()
                    .and_then(|p| user_name(p, uid))
                    .or(Some(uid.to_string()))
            });
        let threads = with_threads.then(|| self.threads(pid));
        Some(HostProcess {
            pid,
            name,
            user,
            ppid,
            pgid,
            cpu_s,
            threads,
            owner: self
                .read(pid, "cgroup")
                .map(|c| cgroup::parse(&c))
                .unwrap_or_default(),
            start_ticks: parse_start_ticks(&stat).unwrap_or(0),
        })
    }

    /// What `pid`'s environment names (its job, a profiler); `None` when it cannot be read (another user's
    /// process and no `CAP_SYS_PTRACE`, or gone). Read once per process by the caller
    /// ([`super::Attributor`]): an environment does not change after `exec`, and reading it
    /// takes the process's memory-map lock, which a training process uses heavily.
    pub fn environ_job(&self, pid: u32) -> Option<Environ> {
        self.environ(pid).map(|e| parse_environ(&e))
    }

    /// The first [`ENVIRON_MAX_BYTES`] of `pid`'s environment; `None` when it cannot be read
    /// (another user's process and no `CAP_SYS_PTRACE`, or gone), logged once at debug level.
    fn environ(&self, pid: u32) -> Option<Vec<u8>> {
        let path = self.root.join(pid.to_string()).join("environ");
        match files::read_head(&path, Input::Environ) {
            Ok((mut buf, cut)) => {
                // Cut at the bound: the last variable may be partial, so it goes.
                if cut || buf.len() as u64 >= ENVIRON_MAX_BYTES {
                    let end = buf.iter().rposition(|b| *b == 0).unwrap_or(0);
                    buf.truncate(end);
                }
                Some(buf)
            }
            Err(error) => {
                if !ENVIRON_DENIED_LOGGED.swap(true, Ordering::Relaxed) {
                    tracing::debug!(%error, path = %path.display(), "process environment unreadable; job identity from it skipped (logged once)");
                }
                None
            }
        }
    }

    /// Each thread's CPU time (s), by thread ID.
    fn threads(&self, pid: u32) -> HashMap<u32, f64> {
        std::fs::read_dir(self.root.join(pid.to_string()).join("task"))
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|t| {
                let tid = t.file_name().to_str()?.parse().ok()?;
                let stat = files::read_text(&t.path().join("stat"), Input::Proc).ok()?;
                parse_stat(&stat).map(|(_, _, _, cpu)| (tid, cpu))
            })
            .collect()
    }

    /// The parent of every visible process, for walking a process tree.
    pub fn parents(&self) -> HashMap<u32, u32> {
        std::fs::read_dir(&self.root)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter_map(|pid| {
                let (_, ppid, _, _) = parse_stat(&self.read(pid, "stat")?)?;
                Some((pid, ppid))
            })
            .collect()
    }
}

/// How often a process's threads are read: each read costs ~10 µs a thread (a PyTorch
/// process has 30–70), every second on every GPU of a node more than the rest of attribution;
/// a thread pegged by the driver stays pegged for longer than this.
pub const THREADS_EVERY_S: f64 = 5.0;

/// CPU use as a share of one core (100% = one core busy), from two readings of a process.
#[derive(Debug, Default)]
pub struct CpuMeter {
    last: HashMap<u32, Last>,
}

/// The last reading of one process: its CPU time, and its threads' with the rate they gave.
#[derive(Debug)]
struct Last {
    t: f64,
    cpu_s: f64,
    threads: Option<(f64, HashMap<u32, f64>)>,
    thread_pct: Option<f64>,
}

impl CpuMeter {
    /// Whether `pid`'s threads are due to be read at `t` (s): the first time, then every
    /// [`THREADS_EVERY_S`].
    pub fn threads_due(&self, pid: u32, t: f64) -> bool {
        match self.last.get(&pid).and_then(|l| l.threads.as_ref()) {
            Some((t0, _)) => t - t0 >= THREADS_EVERY_S,
            None => true,
        }
    }

    /// (process %, busiest thread %) since the last reading of `p` at `t` (s); `None` the first
    /// time a process is seen. The busiest thread is the one whose own CPU time grew most
    /// between the last two readings of the threads, and stays so until the next.
    pub fn rate(&mut self, p: &HostProcess, t: f64) -> (Option<f64>, Option<f64>) {
        let last = self.last.get(&p.pid);
        let cpu_pct = last
            .filter(|l| t > l.t)
            .map(|l| (100.0 * (p.cpu_s - l.cpu_s) / (t - l.t)).max(0.0));
        let before = last.and_then(|l| l.threads.as_ref());
        let (threads, thread_pct) = match (&p.threads, before) {
            (Some(now), Some((t0, then))) if t > *t0 => {
                let busiest = now
                    .iter()
                    .filter_map(|(tid, cpu)| then.get(tid).map(|cpu0| cpu - cpu0))
                    .fold(0.0, f64::max);
                let pct = (100.0 * busiest / (t - t0)).clamp(0.0, 100.0);
                (Some((t, now.clone())), Some(pct))
            }
            (Some(now), _) => (Some((t, now.clone())), None),
            (None, _) => (before.cloned(), last.and_then(|l| l.thread_pct)),
        };
        self.last.insert(
            p.pid,
            Last {
                t,
                cpu_s: p.cpu_s,
                threads,
                thread_pct,
            },
        );
        (cpu_pct, thread_pct)
    }

    /// Forgets processes not seen since `before` (s): the map stays the size of the GPUs' users.
    pub fn forget_before(&mut self, before: f64) {
        self.last.retain(|_, l| l.t >= before);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Recorded on the device machine: a PyTorch training process.
    const STAT: &str = "4242 (pt_main_thread) S 4100 4100 4100 0 -1 4194560 1853021 0 1 0 12345 678 0 0 20 0 58 0 90210 31567003648 1234567 18446744073709551615 1 1 0 0 0 0 0 16781312 17642 0 0 0 17 3 0 0 0 0 0";

    #[test]
    fn stat_lines_give_name_parents_group_and_cpu() {
        let (name, ppid, pgid, cpu) = parse_stat(STAT).expect("a stat line");
        assert_eq!((name.as_str(), ppid, pgid), ("pt_main_thread", 4100, 4100));
        assert!((cpu - 130.23).abs() < 1e-9, "{cpu}");
        // A command with spaces and parentheses.
        let odd = "7 (a (b) c) R 1 7 7 0 -1 0 0 0 0 0 50 50 0 0 20 0 1 0 1 1 1";
        assert_eq!(parse_stat(odd).map(|s| s.0), Some("a (b) c".to_string()));
        assert_eq!(parse_stat("garbage"), None);
    }

    /// Recorded on the device machine: a rank of `torchrun --nnodes 2` started by `srun`
    /// (`tr '\\0' '\\n' < /proc/PID/environ`, trimmed, NULs restored).
    const ENVIRON: &str = "SHELL=/bin/bash\0SLURM_JOB_ID=4711\0SLURM_STEP_ID=0\0SLURM_JOB_USER=alice\0SLURM_JOB_ACCOUNT=vision\0SLURM_JOB_PARTITION=h200\0SLURM_ARRAY_TASK_ID=3\0MASTER_ADDR=node-a\0MASTER_PORT=29500\0TORCHELASTIC_RUN_ID=none\0RANK=37\0LOCAL_RANK=5\0WORLD_SIZE=64\0PATH=/usr/bin\0";

    #[test]
    fn the_environment_names_the_rank_and_the_job() {
        let Environ {
            identity: id,
            slurm_job: slurm,
            profiler,
        } = parse_environ(ENVIRON.as_bytes());
        assert_eq!(slurm.as_deref(), Some("4711"));
        assert_eq!(profiler, None);
        assert_eq!(
            (id.rank, id.local_rank, id.world_size),
            (Some(37), Some(5), Some(64))
        );
        // torchrun's default run id "none" is no key: the rendezvous address is.
        assert_eq!(id.job_key.as_deref(), Some("node-a:29500"));
        assert_eq!(
            (
                id.slurm_step.as_deref(),
                id.slurm_array_task.as_deref(),
                id.slurm_user.as_deref(),
                id.slurm_account.as_deref(),
                id.slurm_partition.as_deref()
            ),
            (
                Some("0"),
                Some("3"),
                Some("alice"),
                Some("vision"),
                Some("h200")
            )
        );
        let elastic = "TORCHELASTIC_RUN_ID=run-9\0MASTER_ADDR=a\0MASTER_PORT=1\0RANK=x\0";
        let e = parse_environ(elastic.as_bytes());
        assert_eq!(
            (e.identity.job_key.as_deref(), e.identity.rank, e.slurm_job),
            (Some("run-9"), None, None)
        );
        // Garbage, invalid UTF-8 and an empty environment: nothing, and no panic.
        assert_eq!(
            parse_environ(b"\xff\xfe=1\0=\0RANK\0\0"),
            Environ::default()
        );
        assert_eq!(parse_environ(b""), Environ::default());
    }

    /// A rank's environment with one more variable, as a profiler's launcher leaves it.
    fn with(var: &str) -> Option<String> {
        profiler_in_environ(format!("{ENVIRON}{var}\0").as_bytes())
    }

    #[test]
    fn an_injected_profiler_is_named_from_its_library_path() {
        // Paths as the tools set them: a standalone install and the CUDA toolkit's copy.
        let ncu = "CUDA_INJECTION64_PATH=/opt/nvidia/nsight-compute/2024.1.1/target/linux-desktop-glibc_2_11_3-x64/libTreeLauncherTargetInjection.so";
        assert_eq!(with(ncu).as_deref(), Some(NSIGHT_COMPUTE));
        let toolkit = "CUDA_INJECTION64_PATH=/usr/local/cuda-12.4/Nsight-Compute-2024.1.1/target/libTreeLauncherTargetInjection.so";
        assert_eq!(with(toolkit).as_deref(), Some(NSIGHT_COMPUTE));
        let by_dir = "CUDA_INJECTION64_PATH=/opt/ncu/lib/libinj.so";
        assert_eq!(with(by_dir).as_deref(), Some(NSIGHT_COMPUTE));
        let nsys = "CUDA_INJECTION64_PATH=/opt/nvidia/nsight-systems/2024.2.1/target-linux-x64/libToolsInjection64.so";
        assert_eq!(with(nsys).as_deref(), Some(NSIGHT_SYSTEMS));
        let nsys_dir = "CUDA_INJECTION64_PATH=/usr/lib/nsys-2023.4/libToolsInjection64.so";
        assert_eq!(with(nsys_dir).as_deref(), Some(NSIGHT_SYSTEMS));
        // A path naming neither: a CUDA injection library. "ncu" inside a word is not the tool.
        let other = "CUDA_INJECTION64_PATH=/home/duncu/tracer/libcupti_trace.so";
        assert_eq!(with(other).as_deref(), Some(CUDA_INJECTION));
        // Set but empty: nothing is injected.
        assert_eq!(with("CUDA_INJECTION64_PATH="), None);
        assert_eq!(with("CUDA_INJECTION64_PATH=  "), None);
        // Only the exact variable: a 32-bit or a look-alike name is not the driver's.
        assert_eq!(
            with("MY_CUDA_INJECTION64_PATH=/opt/nsight-compute/x.so"),
            None
        );
        // The environment parse carries it beside the job.
        let e = parse_environ(format!("{ENVIRON}{ncu}\0").as_bytes());
        assert_eq!(
            (e.profiler.as_deref(), e.identity.rank),
            (Some(NSIGHT_COMPUTE), Some(37))
        );
    }

    #[test]
    fn nsight_systems_and_the_legacy_profiler_are_named_by_their_variables() {
        assert_eq!(
            with("NSYS_PROFILING_SESSION_ID=7").as_deref(),
            Some(NSIGHT_SYSTEMS)
        );
        assert_eq!(
            with("NSYS_TARGET_STD_REDIRECT_ACTIVE=1").as_deref(),
            Some(NSIGHT_SYSTEMS)
        );
        assert_eq!(with("NSYS_PROFILING_SESSION_ID="), None);
        assert_eq!(with("NSYSX=1"), None);
        assert_eq!(
            with("NV_COMPUTE_PROFILER_PERFMON_ENABLE=1").as_deref(),
            Some(COMPUTE_PROFILER)
        );
        assert_eq!(with("NV_COMPUTE_PROFILER=1"), None);
        // A generic injection path beside Nsight Systems' variables is Nsight Systems'; a
        // path that names Nsight Compute wins over a stray NSYS_ variable.
        let both = "CUDA_INJECTION64_PATH=/tmp/libToolsInjection64.so\0NSYS_PROFILING_SESSION_ID=3";
        assert_eq!(with(both).as_deref(), Some(NSIGHT_SYSTEMS));
        let named = "CUDA_INJECTION64_PATH=/opt/nsight-compute/x.so\0NSYS_PROFILING_SESSION_ID=3";
        assert_eq!(with(named).as_deref(), Some(NSIGHT_COMPUTE));
        let old = "CUDA_INJECTION64_PATH=/tmp/x.so\0NV_COMPUTE_PROFILER_PERFMON_ENABLE=1";
        assert_eq!(with(old).as_deref(), Some(CUDA_INJECTION));
    }

    #[test]
    fn a_profiler_is_named_by_its_executable() {
        assert_eq!(profiler_by_name("ncu"), Some(NSIGHT_COMPUTE));
        assert_eq!(profiler_by_name("nsys"), Some(NSIGHT_SYSTEMS));
        assert_eq!(
            profiler_by_name("nv-hostengine"),
            Some("DCGM's host engine (nv-hostengine)")
        );
        // `comm` is cut at 15 characters: dcgmproftester12 reads dcgmproftester1.
        assert_eq!(
            profiler_by_name("dcgmproftester1"),
            Some("DCGM's profiling tester (dcgmproftester)")
        );
        assert_eq!(profiler_by_name("nvidia-dcgm"), Some("DCGM (nvidia-dcgm)"));
        for name in ["python", "ncu-ui", "nsys-ui", "pt_main_thread", ""] {
            assert_eq!(profiler_by_name(name), None, "{name}");
        }
    }

    #[test]
    fn users_come_from_the_uid_and_passwd() {
        let status = "Name:\tpython\nUid:\t1000\t1000\t1000\t1000\nGid:\t1000\n";
        assert_eq!(parse_uid(status), Some(1000));
        let passwd = "root:x:0:0:root:/root:/bin/bash\nalice:x:1000:1000::/home/alice:/bin/sh\n";
        assert_eq!(user_name(passwd, 1000).as_deref(), Some("alice"));
        assert_eq!(user_name(passwd, 7), None);
    }

    #[test]
    fn a_process_tree_and_cpu_rates_from_a_recorded_proc() {
        let root = std::env::temp_dir().join(format!("gpuslack-proc-{}", std::process::id()));
        let pid_dir = root.join("4242");
        std::fs::create_dir_all(pid_dir.join("task/4242")).expect("dirs");
        std::fs::create_dir_all(pid_dir.join("task/4250")).expect("dirs");
        std::fs::write(pid_dir.join("stat"), STAT).expect("stat");
        std::fs::write(
            pid_dir.join("task/4242/stat"),
            STAT.replace("12345 678", "9000 100"),
        )
        .expect("t");
        std::fs::write(
            pid_dir.join("task/4250/stat"),
            STAT.replace("12345 678", "3000 20"),
        )
        .expect("t");
        std::fs::write(pid_dir.join("status"), "Uid:\t0\t0\t0\t0\n").expect("status");
        std::fs::write(pid_dir.join("cgroup"), "0::/slurm/uid_0/job_77/step_0\n").expect("cgroup");
        // An environment past the bound: the variables before it are read, the cut one is not.
        let mut environ = ENVIRON.as_bytes().to_vec();
        environ.extend(std::iter::repeat_n(b'x', ENVIRON_MAX_BYTES as usize));
        std::fs::write(pid_dir.join("environ"), environ).expect("environ");
        let passwd = root.join("passwd");
        std::fs::write(&passwd, "root:x:0:0:root:/root:/bin/bash\n").expect("passwd");
        let procfs = Procfs::new(&root, &passwd);
        let p = procfs.process(4242, true).expect("the process");
        assert_eq!(p.user.as_deref(), Some("root"));
        assert_eq!(p.owner.slurm_job.as_deref(), Some("77"));
        assert_eq!(p.start_ticks, 90210);
        let e = procfs.environ_job(4242).expect("the environment");
        assert_eq!(
            (e.identity.rank, e.slurm_job.as_deref()),
            (Some(37), Some("4711"))
        );
        assert_eq!(procfs.environ_job(9999), None);
        assert_eq!(p.threads, Some(HashMap::from([(4242, 91.0), (4250, 30.2)])));
        assert_eq!(procfs.process(4242, false).and_then(|p| p.threads), None);
        assert_eq!(procfs.parents().get(&4242), Some(&4100));
        let mut meter = CpuMeter::default();
        assert!(meter.threads_due(4242, 10.0));
        assert_eq!(meter.rate(&p, 10.0), (None, None));
        assert!(!meter.threads_due(4242, 11.0));
        // A second later, threads not read: the process's rate, no thread's yet.
        let later = |cpu: f64, threads: Option<[(u32, f64); 2]>| HostProcess {
            cpu_s: p.cpu_s + cpu,
            threads: threads.map(HashMap::from),
            ..p.clone()
        };
        let (cpu, thread) = meter.rate(&later(1.5, None), 11.0);
        assert!((cpu.expect("rate") - 150.0).abs() < 1e-6);
        assert_eq!(thread, None);
        // At 15 s the threads are read again: 4250, with less CPU time in all, was the one
        // pegged (4.95 s of 5), not 4242, whose larger total is history.
        assert!(meter.threads_due(4242, 15.0));
        let (_, thread) = meter.rate(&later(5.0, Some([(4242, 91.05), (4250, 35.15)])), 15.0);
        assert!((thread.expect("rate") - 99.0).abs() < 1e-6, "{thread:?}");
        // Between thread reads, that rate holds.
        let (_, thread) = meter.rate(&later(6.0, None), 16.0);
        assert!((thread.expect("held") - 99.0).abs() < 1e-6);
        meter.forget_before(20.0);
        assert_eq!(meter.rate(&later(7.0, None), 21.0), (None, None));
        let _ = std::fs::remove_dir_all(root);
    }
}
