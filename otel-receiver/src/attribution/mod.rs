//! Whose GPU: the processes holding each GPU (from NVML: PID, GPU memory, share of SM time),
//! enriched from the host (executable, user, CPU use and the busiest thread's, container, pod
//! UID, Slurm job, process group), the Kubernetes containers the kubelet assigned the GPU to,
//! and the job they form. A transform between the live source and the pipeline; a recorded
//! trace carries the result in its `processes` and `pods` columns.
//!
//! One job is the processes sharing a set of GPUs: GPUs whose processes share a Kubernetes pod,
//! a Slurm job, a container or a process group (a launcher's ranks: `torchrun`, `mpirun`) are
//! one job, and the rules across GPUs judge a job's GPUs together.

// Public items here are not all documented yet: the crate's `missing_docs` rule
// (Cargo.toml's [workspace.lints]) is waived for this module until they are.
#![allow(missing_docs)]

pub mod cgroup;
pub mod kubelet;
pub mod procfs;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::sample::Sample;
pub use crate::sample::{GpuProcess, PodContainer};
use kubelet::{GpuIds, PodWatcher};
use procfs::{CpuMeter, Environ, Procfs};

/// The job a GPU's processes form: the first of their job names (the same on every GPU of a
/// job, since they share it).
pub fn job_of(processes: &[GpuProcess]) -> Option<String> {
    processes.iter().filter_map(GpuProcess::job).min()
}

/// The process holding a GPU alone, or the container or pod all its processes share: what the
/// GPU's series are attributed to.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Owner {
    pub pid: Option<u32>,
    pub name: Option<String>,
    pub container_id: Option<String>,
    pub pod_uid: Option<String>,
}

/// The pod a GPU is assigned to, when the kubelet assigned it to one pod: with the container,
/// when to one container of it. Under time-slicing several pods share a GPU, and none owns it.
#[derive(Debug, Clone, PartialEq)]
pub struct PodOwner<'a> {
    pub pod: &'a str,
    pub namespace: &'a str,
    pub container: Option<&'a str>,
}

pub fn pod_owner_of(pods: &[PodContainer]) -> Option<PodOwner<'_>> {
    let first = pods.first()?;
    let one_pod = pods
        .iter()
        .all(|p| p.pod == first.pod && p.namespace == first.namespace);
    one_pod.then(|| PodOwner {
        pod: &first.pod,
        namespace: &first.namespace,
        container: (pods.len() == 1).then_some(first.container.as_str()),
    })
}

pub fn owner_of(processes: &[GpuProcess]) -> Option<Owner> {
    let first = processes.first()?;
    let all = |f: &dyn Fn(&GpuProcess) -> Option<String>| {
        let v = f(first)?;
        processes
            .iter()
            .all(|p| f(p).as_deref() == Some(v.as_str()))
            .then_some(v)
    };
    let alone = processes.len() == 1;
    Some(Owner {
        pid: alone.then_some(first.pid),
        name: alone.then(|| first.name.clone()).flatten(),
        container_id: all(&|p| p.container_id.clone()),
        pod_uid: all(&|p| p.pod_uid.clone()),
    })
}

/// Every process descended from `root` (itself included), by the parent map of `/proc`.
pub fn descendants(parents: &std::collections::HashMap<u32, u32>, root: u32) -> HashSet<u32> {
    let mut tree = HashSet::from([root]);
    loop {
        let before = tree.len();
        for (pid, ppid) in parents {
            if tree.contains(ppid) {
                tree.insert(*pid);
            }
        }
        if tree.len() == before {
            return tree;
        }
    }
}

/// Fills in what the host knows of each sample's processes, and which pods the kubelet
/// assigned its GPU to, at the process list's cadence (once a second).
#[derive(Debug)]
pub struct Attributor {
    procfs: Procfs,
    cpu: CpuMeter,
    pods: Option<(PodWatcher, HashMap<u32, GpuIds>)>,
    /// Each process's environment, read once (it does not change after `exec`): by PID and
    /// start time, so that a reused PID is read afresh, with when it was last seen, so that
    /// the map stays the size of the GPUs' users. An unreadable one is kept as empty, not
    /// retried every second.
    environs: HashMap<(u32, u64), (Environ, f64)>,
}

impl Attributor {
    pub fn new(procfs: Procfs) -> Self {
        Attributor {
            procfs,
            cpu: CpuMeter::default(),
            pods: None,
            environs: HashMap::new(),
        }
    }

    /// Names the pods holding each GPU, by the identifiers the device plugin knows it by.
    pub fn with_pods(mut self, watcher: PodWatcher, gpus: HashMap<u32, GpuIds>) -> Self {
        self.pods = Some((watcher, gpus));
        self
    }

    pub fn enrich(&mut self, sample: &mut Sample) {
        let Some(processes) = sample.processes.as_ref() else {
            return;
        };
        if let Some((watcher, gpus)) = &self.pods {
            sample.pods = watcher
                .current()
                .zip(gpus.get(&sample.gpu))
                .map(|(map, ids)| Arc::new(map.holders(ids)));
        }
        let t = sample.t;
        let enriched: Vec<GpuProcess> = processes
            .iter()
            .map(|p| {
                let threads = self.cpu.threads_due(p.pid, t);
                let Some(host) = self.procfs.process(p.pid, threads) else {
                    // Gone already, or in another PID namespace: what NVML said stays.
                    return p.clone();
                };
                let (cpu_pct, thread_pct) = self.cpu.rate(&host, t);
                let procfs = &self.procfs;
                let (environ, seen) = self
                    .environs
                    .entry((p.pid, host.start_ticks))
                    .or_insert_with(|| (procfs.environ_job(p.pid).unwrap_or_default(), t));
                *seen = t;
                // A profiler's own process (one holding a context) by its name, else one
                // attached to the job by its environment.
                let profiler = procfs::profiler_by_name(&host.name)
                    .map(String::from)
                    .or_else(|| environ.profiler.clone());
                GpuProcess {
                    name: Some(host.name),
                    user: host.user,
                    cpu_pct,
                    thread_pct,
                    pgid: Some(host.pgid),
                    container_id: host.owner.container_id,
                    pod_uid: host.owner.pod_uid,
                    slurm_job: host.owner.slurm_job.or_else(|| environ.slurm_job.clone()),
                    identity: environ.identity.clone(),
                    profiler,
                    ..p.clone()
                }
            })
            .collect();
        self.cpu.forget_before(t - 60.0);
        self.environs.retain(|_, (_, seen)| *seen >= t - 60.0);
        sample.processes = Some(Arc::new(enriched));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(pid: u32, pgid: u32) -> GpuProcess {
        GpuProcess {
            pid,
            pgid: Some(pgid),
            ..GpuProcess::default()
        }
    }

    #[test]
    fn jobs_are_named_by_slurm_then_torch_then_pod_then_container_then_process_group() {
        let mut a = p(10, 7);
        assert_eq!(a.job().as_deref(), Some("pgid:7"));
        a.container_id = Some("3f4c2e1b9a8d7c6b5a4f".into());
        assert_eq!(a.job().as_deref(), Some("container:3f4c2e1b9a8d"));
        a.pod_uid = Some("0b6b".into());
        assert_eq!(a.job().as_deref(), Some("pod:0b6b"));
        // A PyTorchJob's ranks run in a pod each: the rendezvous key is what they share.
        a.identity.job_key = Some("node-a:29500".into());
        assert_eq!(a.job().as_deref(), Some("torch:node-a:29500"));
        a.slurm_job = Some("42".into());
        assert_eq!(a.job().as_deref(), Some("slurm:42"));
        // Two ranks of one torchrun share its process group: one job on two GPUs.
        assert_eq!(job_of(&[p(11, 5)]), job_of(&[p(12, 5)]));
        assert_ne!(job_of(&[p(11, 5)]), job_of(&[p(21, 9)]));
        assert_eq!(job_of(&[]), None);
    }

    #[test]
    fn the_owner_is_the_lone_process_or_what_all_share() {
        let mut a = p(10, 7);
        a.name = Some("python".into());
        a.container_id = Some("c1".into());
        let alone = owner_of(std::slice::from_ref(&a)).expect("owner");
        assert_eq!(
            (alone.pid, alone.name.as_deref()),
            (Some(10), Some("python"))
        );
        let mut b = p(11, 7);
        b.container_id = Some("c1".into());
        let shared = owner_of(&[a.clone(), b.clone()]).expect("owner");
        assert_eq!(
            (shared.pid, shared.container_id.as_deref()),
            (None, Some("c1"))
        );
        b.container_id = Some("c2".into());
        assert_eq!(owner_of(&[a, b]).and_then(|o| o.container_id), None);
    }

    #[test]
    fn a_gpu_assigned_to_one_pod_is_owned_by_it_and_a_shared_one_by_none() {
        let c = |pod: &str, container: &str| PodContainer {
            pod: pod.into(),
            namespace: "ml".into(),
            container: container.into(),
        };
        let one = [c("trainer-0", "trainer")];
        assert_eq!(
            pod_owner_of(&one),
            Some(PodOwner {
                pod: "trainer-0",
                namespace: "ml",
                container: Some("trainer")
            })
        );
        // Two containers of one pod: the pod, no container.
        let two = [c("trainer-0", "trainer"), c("trainer-0", "profiler")];
        assert_eq!(
            pod_owner_of(&two).map(|o| (o.pod, o.container)),
            Some(("trainer-0", None))
        );
        // Time-slicing: two pods on one GPU.
        assert_eq!(pod_owner_of(&[c("a", "x"), c("b", "x")]), None);
        assert_eq!(pod_owner_of(&[]), None);
    }

    #[test]
    fn a_process_environment_is_read_once_and_afresh_for_a_reused_pid() {
        let root = std::env::temp_dir().join(format!("gpuslack-environ-{}", std::process::id()));
        let dir = root.join("4242");
        std::fs::create_dir_all(&dir).expect("dirs");
        let stat = |start: u32| {
            format!("4242 (python) S 1 4242 4242 0 -1 0 0 0 0 0 100 50 0 0 20 0 1 0 {start} 1 1")
        };
        std::fs::write(dir.join("stat"), stat(500)).expect("stat");
        std::fs::write(dir.join("environ"), "RANK=3\0SLURM_JOB_ID=77\0").expect("environ");
        let mut attributor = Attributor::new(Procfs::new(&root, &root.join("passwd")));
        let rank_at = |a: &mut Attributor, t: f64| {
            let mut s = Sample::new(t, 0);
            s.processes = Some(Arc::new(vec![GpuProcess {
                pid: 4242,
                ..GpuProcess::default()
            }]));
            a.enrich(&mut s);
            let p = s.processes.as_deref().expect("processes")[0].clone();
            (p.identity.rank, p.slurm_job)
        };
        assert_eq!(rank_at(&mut attributor, 1.0), (Some(3), Some("77".into())));
        // Read once: a later change to the file (no process's environment changes after exec)
        // is not read again.
        std::fs::write(dir.join("environ"), "RANK=9\0").expect("environ");
        assert_eq!(rank_at(&mut attributor, 2.0).0, Some(3));
        // The PID reused by a process started later: its own environment.
        std::fs::write(dir.join("stat"), stat(900)).expect("stat");
        assert_eq!(rank_at(&mut attributor, 3.0), (Some(9), None));
        // The first process's entry goes once it has not been seen for a minute.
        rank_at(&mut attributor, 100.0);
        assert_eq!(attributor.environs.len(), 1);
        let _ = std::fs::remove_dir_all(root);
    }

    #[test]
    fn a_profiler_reaches_the_process_by_its_environment_or_its_name() {
        let root = std::env::temp_dir().join(format!("gpuslack-profiler-{}", std::process::id()));
        let proc = |pid: u32, name: &str, environ: &str| {
            let dir = root.join(pid.to_string());
            std::fs::create_dir_all(&dir).expect("dirs");
            let stat = format!(
                "{pid} ({name}) S 1 {pid} {pid} 0 -1 0 0 0 0 0 100 50 0 0 20 0 1 0 500 1 1"
            );
            std::fs::write(dir.join("stat"), stat).expect("stat");
            std::fs::write(dir.join("environ"), environ).expect("environ");
        };
        proc(
            1234,
            "python",
            "RANK=0\0CUDA_INJECTION64_PATH=/opt/nvidia/nsight-compute/2024.1.1/target/linux-desktop-glibc_2_11_3-x64/libTreeLauncherTargetInjection.so\0",
        );
        proc(1300, "nsys", "HOME=/root\0");
        proc(1400, "python", "RANK=1\0");
        let mut attributor = Attributor::new(Procfs::new(&root, &root.join("passwd")));
        let mut s = Sample::new(1.0, 0);
        s.processes = Some(Arc::new(
            [1234, 1300, 1400, 9999]
                .map(|pid| GpuProcess {
                    pid,
                    ..GpuProcess::default()
                })
                .to_vec(),
        ));
        attributor.enrich(&mut s);
        let profilers: Vec<Option<&str>> = s
            .processes
            .as_deref()
            .expect("processes")
            .iter()
            .map(|p| p.profiler.as_deref())
            .collect();
        // The process gone from /proc (9999) keeps what NVML said: no profiler.
        assert_eq!(
            profilers,
            [
                Some(procfs::NSIGHT_COMPUTE),
                Some(procfs::NSIGHT_SYSTEMS),
                None,
                None
            ]
        );
        let _ = std::fs::remove_dir_all(root);
    }

    #[test]
    fn a_process_tree_holds_every_descendant() {
        let parents = [(2, 1), (3, 2), (4, 3), (9, 8)].into_iter().collect();
        assert_eq!(descendants(&parents, 2), HashSet::from([2, 3, 4]));
    }
}
