//! One exported value and its attributes: what the export state keeps per owner and what the
//! exporters render. Below the table's users and the state alike, so that neither imports the
//! other for it.

use super::catalogue::MetricDef;
use crate::attribution::{owner_of, pod_owner_of, GpuProcess};
use crate::diagnosis::WindowReport;

/// One value of one metric for one GPU, with its whole attribute set (the GPU's identity, its
/// owner's on a per-owner point, the point's own).
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    pub def: MetricDef,
    pub value: f64,
    pub attributes: Vec<(&'static str, String)>,
}

/// A point's attributes beyond its value: keys are static, values are the GPU's and the job's.
pub type Attributes = Vec<(&'static str, String)>;

/// Every key [`owner_attributes`] may set: what names a GPU's owner, and so what no gauge may
/// carry (docs/EXPORT.md, "Series budget").
pub const OWNER_KEYS: [&str; 8] = [
    "process.pid",
    "process.executable.name",
    "container.id",
    "k8s.pod.uid",
    "k8s.pod.name",
    "k8s.namespace.name",
    "k8s.container.name",
    "gpuslack.job.id",
];

/// Whoever owns the GPU in a window, by the semantic conventions' names: the process holding it
/// alone, the container or pod all its processes share, the pod (and container) the kubelet
/// assigned it to, and the job. Empty when nobody does. They name the per-owner counters, the
/// process points, the job info and the log records, never a gauge (`points`' module doc).
pub fn owner_attributes(report: &WindowReport) -> Attributes {
    let mut attrs = Vec::new();
    if let Some(owner) = report.stats.processes.as_deref().and_then(|p| owner_of(p)) {
        if let Some(pid) = owner.pid {
            attrs.push(("process.pid", pid.to_string()));
        }
        if let Some(name) = owner.name {
            attrs.push(("process.executable.name", name));
        }
        if let Some(id) = owner.container_id {
            attrs.push(("container.id", id));
        }
        if let Some(uid) = owner.pod_uid {
            attrs.push(("k8s.pod.uid", uid));
        }
    }
    if let Some(pod) = report.stats.pods.as_deref().and_then(|p| pod_owner_of(p)) {
        attrs.push(("k8s.pod.name", pod.pod.to_string()));
        attrs.push(("k8s.namespace.name", pod.namespace.to_string()));
        if let Some(container) = pod.container {
            attrs.push(("k8s.container.name", container.to_string()));
        }
    }
    if let Some(job) = &report.job {
        attrs.push(("gpuslack.job.id", job.clone()));
    }
    attrs
}

/// The one pod (and, where it has one container there, the container) the kubelet assigned the
/// GPU to, by the semantic conventions' names: what `--pod-labels` puts on every per-GPU series
/// (docs/EXPORT.md, "Pods on GPU series"). Empty where no pod or several time-slice the GPU.
pub fn pod_attributes(report: &WindowReport) -> Attributes {
    let Some(pod) = report.stats.pods.as_deref().and_then(|p| pod_owner_of(p)) else {
        return Attributes::new();
    };
    let mut attrs = vec![
        ("k8s.pod.name", pod.pod.to_string()),
        ("k8s.namespace.name", pod.namespace.to_string()),
    ];
    if let Some(container) = pod.container {
        attrs.push(("k8s.container.name", container.to_string()));
    }
    attrs
}

/// The job a GPU's current owner belongs to, by the names of docs/EXPORT.md: the agent's job id,
/// the ranks and the scheduler's own identity where the process environment gave them, the pod
/// and namespace where the kubelet did. `None` when no process names a job. These ride on the
/// one `gpuslack.job.info` series per GPU, never on every series: a Slurm job's six
/// identifiers and the ranks on every gauge would pass the 20 labels a series may carry.
pub fn job_attributes(report: &WindowReport) -> Option<Attributes> {
    let job = report.job.as_ref()?;
    let processes: &[GpuProcess] = report.stats.processes.as_deref().map_or(&[], |p| p);
    // The process that names the job (the lowest rank first, where several do: a launcher and
    // its worker on one GPU).
    let named = processes
        .iter()
        .filter(|p| p.job().as_ref() == Some(job))
        .min_by_key(|p| p.identity.rank.unwrap_or(u32::MAX));
    let mut attrs = vec![("gpuslack.job.id", job.clone())];
    if let Some(p) = named {
        push_identity(&mut attrs, p);
    }
    if let Some(pod) = report.stats.pods.as_deref().and_then(|p| pod_owner_of(p)) {
        attrs.push(("k8s.pod.name", pod.pod.to_string()));
        attrs.push(("k8s.namespace.name", pod.namespace.to_string()));
    }
    Some(attrs)
}

fn push_identity(attrs: &mut Attributes, p: &GpuProcess) {
    let id = &p.identity;
    let mut push = |key: &'static str, value: Option<String>| {
        if let Some(v) = value {
            attrs.push((key, v));
        }
    };
    push("gpuslack.job.rank", id.rank.map(|r| r.to_string()));
    push(
        "gpuslack.job.local_rank",
        id.local_rank.map(|r| r.to_string()),
    );
    push(
        "gpuslack.job.world_size",
        id.world_size.map(|r| r.to_string()),
    );
    push("slurm.job.id", p.slurm_job.clone());
    push("slurm.job.step", id.slurm_step.clone());
    push("slurm.job.array_task", id.slurm_array_task.clone());
    push("slurm.job.user", id.slurm_user.clone());
    push("slurm.job.account", id.slurm_account.clone());
    push("slurm.job.partition", id.slurm_partition.clone());
    push("k8s.pod.uid", p.pod_uid.clone());
}

/// The MIG profile of an instance, from the name NVML gives it ("NVIDIA H200 MIG 1g.18gb").
pub fn mig_profile(name: &str) -> Option<&str> {
    let (_, profile) = name.rsplit_once(" MIG ")?;
    let profile = profile.trim();
    (!profile.is_empty()).then_some(profile)
}
