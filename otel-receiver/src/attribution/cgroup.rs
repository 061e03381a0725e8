//! Who a process belongs to, from its cgroup (`/proc/PID/cgroup`, v1 or v2): the container
//! (Docker, containerd, CRI-O: a 64-hex id), the Kubernetes pod (`kubepods…pod<uid>`), the
//! Slurm job (`job_<id>`). Pod names come from the kubelet; the cgroup only knows the pod's UID.

/// What a process's cgroup says of its owner.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CgroupOwner {
    pub container_id: Option<String>,
    pub pod_uid: Option<String>,
    pub slurm_job: Option<String>,
}

fn is_hex64(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// A container id in one path component: `docker-<id>.scope`, `cri-containerd-<id>.scope`,
/// `crio-<id>.scope`, or the bare id (cgroup v1 `/docker/<id>`, `/kubepods/…/<id>`).
fn container_in(component: &str) -> Option<String> {
    let stem = component.strip_suffix(".scope").unwrap_or(component);
    let id = stem.rsplit(['-', ':']).next().unwrap_or(stem);
    is_hex64(id).then(|| id.to_string())
}

/// A pod UID in one path component: `pod<uid>` (cgroupfs) or `kubepods-burstable-pod<uid>.slice`
/// (systemd, with `_` for `-`).
fn pod_in(component: &str) -> Option<String> {
    let stem = component.strip_suffix(".slice").unwrap_or(component);
    let at = stem.rfind("pod")?;
    let uid = stem[at + 3..].replace('_', "-");
    let ok = uid.len() == 36 && uid.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-');
    ok.then_some(uid)
}

/// `job_<id>` of Slurm's cgroup plugin (`/slurm/uid_1000/job_42/step_0`).
fn slurm_in(component: &str) -> Option<String> {
    let id = component.strip_prefix("job_")?;
    (!id.is_empty() && id.bytes().all(|b| b.is_ascii_digit())).then(|| id.to_string())
}

/// Parses the text of `/proc/PID/cgroup`: one `hierarchy:controllers:path` line per hierarchy.
pub fn parse(text: &str) -> CgroupOwner {
    let mut owner = CgroupOwner::default();
    for line in text.lines() {
        let Some(path) = line.splitn(3, ':').nth(2) else {
            continue;
        };
        for component in path.split('/') {
            if owner.container_id.is_none() {
                owner.container_id = container_in(component);
            }
            if owner.pod_uid.is_none() {
                owner.pod_uid = pod_in(component);
            }
            if owner.slurm_job.is_none() {
                owner.slurm_job = slurm_in(component);
            }
        }
    }
    owner
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "3f4c2e1b9a8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c8b7a6f5e4d3c2b";

    #[test]
    fn kubernetes_on_cgroup_v2_with_systemd_and_containerd() {
        let text = format!("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0b6b7f4e_1c2d_4e5f_8a9b_0c1d2e3f4a5b.slice/cri-containerd-{ID}.scope\n");
        let o = parse(&text);
        assert_eq!(
            o.pod_uid.as_deref(),
            Some("0b6b7f4e-1c2d-4e5f-8a9b-0c1d2e3f4a5b")
        );
        assert_eq!(o.container_id.as_deref(), Some(ID));
        assert_eq!(o.slurm_job, None);
    }

    #[test]
    fn kubernetes_on_cgroup_v1_with_cgroupfs_and_docker() {
        let text = format!(
            "12:devices:/kubepods/besteffort/pod0b6b7f4e-1c2d-4e5f-8a9b-0c1d2e3f4a5b/{ID}\n11:memory:/kubepods/besteffort/pod0b6b7f4e-1c2d-4e5f-8a9b-0c1d2e3f4a5b/{ID}\n1:name=systemd:/kubepods/besteffort/pod0b6b7f4e-1c2d-4e5f-8a9b-0c1d2e3f4a5b/{ID}\n"
        );
        let o = parse(&text);
        assert_eq!(
            o.pod_uid.as_deref(),
            Some("0b6b7f4e-1c2d-4e5f-8a9b-0c1d2e3f4a5b")
        );
        assert_eq!(o.container_id.as_deref(), Some(ID));
    }

    #[test]
    fn docker_crio_slurm_and_a_plain_host_process() {
        assert_eq!(
            parse(&format!("0::/system.slice/docker-{ID}.scope\n"))
                .container_id
                .as_deref(),
            Some(ID)
        );
        assert_eq!(
            parse(&format!("0::/machine.slice/crio-{ID}.scope\n"))
                .container_id
                .as_deref(),
            Some(ID)
        );
        let slurm = parse("4:memory:/slurm/uid_1000/job_4242/step_0/task_0\n");
        assert_eq!(slurm.slurm_job.as_deref(), Some("4242"));
        // This machine's own (recorded): a memory cgroup named by a 32-hex id, not a container.
        let host = parse(
            "9:name=systemd:/\n4:memory:/process_api/69fd421ffe02db3dac2077318883b999\n0::/\n",
        );
        assert_eq!(host, CgroupOwner::default());
        assert_eq!(parse("garbage without colons"), CgroupOwner::default());
    }
}
