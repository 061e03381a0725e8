//! Whose GPU: the processes holding each GPU (from NVML: PID, GPU memory, share of SM time),
//! enriched from the host (executable, user, CPU use and the busiest thread's, container, pod
//! UID, Slurm job, process group), and the job they form. A transform between the live source
//! and the pipeline; a recorded trace carries the result in its `processes` column.
//!
//! One job is the processes sharing a set of GPUs: GPUs whose processes share a Kubernetes pod,
//! a Slurm job, a container or a process group (a launcher's ranks: `torchrun`, `mpirun`) are
//! one job, and the rules across GPUs judge a job's GPUs together.

pub mod cgroup;
pub mod procfs;

use std::collections::HashSet;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::sample::Sample;
use procfs::{CpuMeter, Procfs};

/// One process holding one GPU.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuProcess {
    pub pid: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// GPU memory the process holds (bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_mem_bytes: Option<f64>,
    /// Its share of the GPU's SM time, averaged over NVML's samples of the last 5 s (%).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm_pct: Option<f64>,
    /// Host CPU use, 100 = one core, all threads…
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_pct: Option<f64>,
    /// …and its busiest thread's (a launch-bound job pegs one at 100% in the driver).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_pct: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pgid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_uid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm_job: Option<String>,
}

impl GpuProcess {
    /// What names this process's job, most specific first.
    pub fn job(&self) -> Option<String> {
        if let Some(uid) = &self.pod_uid {
            return Some(format!("pod:{uid}"));
        }
        if let Some(job) = &self.slurm_job {
            return Some(format!("slurm:{job}"));
        }
        if let Some(id) = &self.container_id {
            return Some(format!("container:{}", &id[..id.len().min(12)]));
        }
        self.pgid
            .or(Some(self.pid))
            .map(|pgid| format!("pgid:{pgid}"))
    }
}

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

/// Fills in what the host knows of each sample's processes.
#[derive(Debug)]
pub struct Attributor {
    procfs: Procfs,
    cpu: CpuMeter,
}

impl Attributor {
    pub fn new(procfs: Procfs) -> Self {
        Attributor {
            procfs,
            cpu: CpuMeter::default(),
        }
    }

    pub fn enrich(&mut self, sample: &mut Sample) {
        let Some(processes) = sample.processes.as_ref() else {
            return;
        };
        let t = sample.t;
        let enriched: Vec<GpuProcess> = processes
            .iter()
            .map(|p| {
                let Some(host) = self.procfs.process(p.pid) else {
                    // Gone already, or in another PID namespace: what NVML said stays.
                    return p.clone();
                };
                let (cpu_pct, thread_pct) = self.cpu.rate(&host, t);
                GpuProcess {
                    name: Some(host.name),
                    user: host.user,
                    cpu_pct,
                    thread_pct,
                    pgid: Some(host.pgid),
                    container_id: host.owner.container_id,
                    pod_uid: host.owner.pod_uid,
                    slurm_job: host.owner.slurm_job,
                    ..p.clone()
                }
            })
            .collect();
        self.cpu.forget_before(t - 60.0);
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
    fn jobs_are_named_by_pod_then_slurm_then_container_then_process_group() {
        let mut a = p(10, 7);
        assert_eq!(a.job().as_deref(), Some("pgid:7"));
        a.container_id = Some("3f4c2e1b9a8d7c6b5a4f".into());
        assert_eq!(a.job().as_deref(), Some("container:3f4c2e1b9a8d"));
        a.slurm_job = Some("42".into());
        assert_eq!(a.job().as_deref(), Some("slurm:42"));
        a.pod_uid = Some("0b6b".into());
        assert_eq!(a.job().as_deref(), Some("pod:0b6b"));
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
    fn a_process_tree_holds_every_descendant() {
        let parents = [(2, 1), (3, 2), (4, 3), (9, 8)].into_iter().collect();
        assert_eq!(descendants(&parents, 2), HashSet::from([2, 3, 4]));
    }
}
