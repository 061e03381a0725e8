//! One exported value and its attributes: what the export state keeps per owner and what the
//! exporters render. Below the table's users and the state alike, so that neither imports the
//! other for it.

use super::catalogue::MetricDef;
use crate::attribution::{owner_of, pod_owner_of};
use crate::diagnosis::WindowReport;

/// One value of one metric for one GPU, with its whole attribute set (the GPU's, its owner's,
/// the point's own).
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    pub def: MetricDef,
    pub value: f64,
    pub attributes: Vec<(&'static str, String)>,
}

/// A point's attributes beyond its value: keys are static, values are the GPU's and the job's.
pub type Attributes = Vec<(&'static str, String)>;

/// Whoever owns the GPU in a window, by the semantic conventions' names: the process holding it
/// alone, the container or pod all its processes share, the pod (and container) the kubelet
/// assigned it to, and the job. Empty when nobody does.
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
