//! Which Kubernetes pods hold each GPU, from the kubelet's PodResources API: the gRPC service
//! `v1.PodResourcesLister` on `/var/lib/kubelet/pod-resources/kubelet.sock`, whose `List` maps
//! the device IDs the device plugin handed out (GPU and MIG UUIDs) to pods and containers. It
//! names a pod that holds a GPU and runs nothing on it, which no process list can, and it keeps
//! naming each pod under time-slicing, where several share one GPU. dcgm-exporter's method.
//!
//! The messages below declare the part of `k8s.io/kubelet/pkg/apis/podresources/v1/api.proto`
//! this client reads, with the published field numbers; prost skips the fields it leaves out
//! (CPU IDs, memory, topology, DRA claims). `tests/support/podresources/v1/api.proto` declares
//! the whole service for the test server, which grpcio compiles on its own: a field number
//! wrong here fails the tests against it.
//!
//! A thread of its own asks the kubelet every [`POLL`], so a slow or hung kubelet never delays
//! a sample; the sampling loop reads the last answer.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::PodContainer;

/// Where the kubelet serves PodResources on every node.
pub const DEFAULT_SOCKET: &str = "/var/lib/kubelet/pod-resources/kubelet.sock";

/// How often the kubelet is asked. A pod that starts on a GPU is named within this.
pub const POLL: Duration = Duration::from_secs(10);

/// A list older than this (the kubelet stopped answering) names nobody: stale pods would be
/// attributed a GPU they may have left.
pub const STALE_AFTER: Duration = Duration::from_secs(60);

/// One call's limit, connection included.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// The kubelet caps its own messages at 16 MiB; tonic's 4 MiB default could refuse a full
/// node's list.
const MAX_MESSAGE_BYTES: usize = 16 << 20;

#[derive(Clone, PartialEq, prost::Message)]
pub struct ListPodResourcesRequest {}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ListPodResourcesResponse {
    #[prost(message, repeated, tag = "1")]
    pub pod_resources: Vec<PodResources>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PodResources {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub namespace: String,
    #[prost(message, repeated, tag = "3")]
    pub containers: Vec<ContainerResources>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerResources {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, repeated, tag = "2")]
    pub devices: Vec<ContainerDevices>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerDevices {
    #[prost(string, tag = "1")]
    pub resource_name: String,
    #[prost(string, repeated, tag = "2")]
    pub device_ids: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum KubeletError {
    /// `reason` goes down to the OS's ("Permission denied": the socket is root's), which
    /// tonic's own message ("transport error") leaves out.
    #[error("cannot connect to the kubelet at {socket}: {reason}")]
    Connect { socket: PathBuf, reason: String },
    #[error("the kubelet at {socket} answered List with {code:?}: {message}")]
    Status {
        socket: PathBuf,
        code: tonic::Code,
        message: String,
    },
    #[error("cannot start the kubelet client's runtime: {0}")]
    Runtime(std::io::Error),
}

/// Asks the kubelet at `socket` which devices each pod's containers hold.
pub async fn list(socket: &Path) -> Result<ListPodResourcesResponse, KubeletError> {
    let path = socket.to_path_buf();
    let channel = tonic::transport::Endpoint::from_static("http://kubelet")
        .connect_timeout(CALL_TIMEOUT)
        .timeout(CALL_TIMEOUT)
        .connect_with_connector(tower::service_fn(move |_: http::Uri| {
            let path = path.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(path).await?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
            }
        }))
        .await
        .map_err(|e| KubeletError::Connect {
            socket: socket.to_path_buf(),
            reason: crate::causes::causes(&e),
        })?;
    let status = |s: tonic::Status| KubeletError::Status {
        socket: socket.to_path_buf(),
        code: s.code(),
        message: s.message().to_string(),
    };
    let mut grpc = tonic::client::Grpc::new(channel).max_decoding_message_size(MAX_MESSAGE_BYTES);
    grpc.ready()
        .await
        .map_err(|e| status(tonic::Status::unavailable(e.to_string())))?;
    let codec =
        tonic_prost::ProstCodec::<ListPodResourcesRequest, ListPodResourcesResponse>::default();
    let path = http::uri::PathAndQuery::from_static("/v1.PodResourcesLister/List");
    let response = grpc
        .unary(tonic::Request::new(ListPodResourcesRequest {}), path, codec)
        .await
        .map_err(status)?;
    Ok(response.into_inner())
}

/// How the device plugin named a GPU in a pod's allocation.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum DeviceKey {
    /// `GPU-…` or `MIG-…`: NVIDIA's device plugin by default.
    Uuid(String),
    /// `nvidiaN`, the `/dev/nvidiaN` minor number: GKE's device plugin.
    Minor(u32),
    /// `N`, NVML's index: NVIDIA's plugin with `DEVICE_ID_STRATEGY=index`.
    Index(u32),
}

impl DeviceKey {
    fn parse(id: &str) -> Option<DeviceKey> {
        // Time-slicing and MPS hand out replicas of one GPU as `GPU-…::0`, `GPU-…::1`, …
        let id = id.split("::").next().unwrap_or(id);
        if id.starts_with("GPU-") || id.starts_with("MIG-") {
            return Some(DeviceKey::Uuid(id.to_string()));
        }
        if let Some(minor) = id.strip_prefix("nvidia") {
            return minor.parse().ok().map(DeviceKey::Minor);
        }
        id.parse().ok().map(DeviceKey::Index)
    }
}

/// What identifies one GPU (or MIG instance) of this host to the device plugin.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpuIds {
    pub uuid: Option<String>,
    pub minor_number: Option<u32>,
    /// NVML's index, for a whole GPU only: MIG instances are never named by index alone.
    pub index: Option<u32>,
}

/// The containers holding each device, from one `List` answer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodMap {
    holders: HashMap<DeviceKey, Vec<PodContainer>>,
}

impl PodMap {
    /// Reads the NVIDIA devices (`nvidia.com/gpu`, `nvidia.com/mig-…`, …) out of the answer;
    /// other resources (NICs, FPGAs) are not ours.
    pub fn new(response: &ListPodResourcesResponse) -> PodMap {
        let mut holders: HashMap<DeviceKey, Vec<PodContainer>> = HashMap::new();
        for pod in &response.pod_resources {
            for container in &pod.containers {
                let ids = container
                    .devices
                    .iter()
                    .filter(|d| d.resource_name.starts_with("nvidia.com/"))
                    .flat_map(|d| &d.device_ids);
                for key in ids.filter_map(|id| DeviceKey::parse(id)) {
                    let holder = PodContainer {
                        pod: pod.name.clone(),
                        namespace: pod.namespace.clone(),
                        container: container.name.clone(),
                    };
                    let list = holders.entry(key).or_default();
                    if !list.contains(&holder) {
                        list.push(holder);
                    }
                }
            }
        }
        PodMap { holders }
    }

    /// The containers holding this GPU, in a stable order; empty when none does.
    pub fn holders(&self, gpu: &GpuIds) -> Vec<PodContainer> {
        let keys = [
            gpu.uuid.clone().map(DeviceKey::Uuid),
            gpu.minor_number.map(DeviceKey::Minor),
            gpu.index.map(DeviceKey::Index),
        ];
        let mut found: Vec<PodContainer> = keys
            .iter()
            .flatten()
            .filter_map(|k| self.holders.get(k))
            .flatten()
            .cloned()
            .collect();
        found.sort();
        found.dedup();
        found
    }

    /// Pods holding at least one NVIDIA device.
    pub fn pods(&self) -> usize {
        let mut pods: Vec<(&str, &str)> = self
            .holders
            .values()
            .flatten()
            .map(|h| (h.namespace.as_str(), h.pod.as_str()))
            .collect();
        pods.sort_unstable();
        pods.dedup();
        pods.len()
    }
}

#[derive(Debug, Default)]
struct Latest {
    map: Option<(Instant, Arc<PodMap>)>,
    stop: bool,
}

/// Asks the kubelet on a thread of its own and keeps its last answer.
#[derive(Debug)]
pub struct PodWatcher {
    shared: Arc<(Mutex<Latest>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

impl PodWatcher {
    /// Starts watching `socket`; `None`, silently, where there is no socket (not a Kubernetes
    /// node, or the socket not mounted into the agent's pod).
    pub fn start(socket: &Path) -> Option<PodWatcher> {
        if !socket.exists() {
            tracing::debug!(socket = %socket.display(), "no kubelet PodResources socket; pods not attributed");
            return None;
        }
        let shared = Arc::new((Mutex::new(Latest::default()), Condvar::new()));
        let theirs = shared.clone();
        let socket = socket.to_path_buf();
        let thread = std::thread::Builder::new()
            .name("gpuslack-kubelet".into())
            .spawn(move || watch(&socket, &theirs));
        match thread {
            Ok(thread) => Some(PodWatcher {
                shared,
                thread: Some(thread),
            }),
            Err(error) => {
                tracing::warn!(%error, "cannot start the kubelet watcher; pods not attributed");
                None
            }
        }
    }

    /// The kubelet's last answer, unless it is older than [`STALE_AFTER`].
    pub fn current(&self) -> Option<Arc<PodMap>> {
        let latest = self.shared.0.lock().ok()?;
        let (at, map) = latest.map.as_ref()?;
        (at.elapsed() < STALE_AFTER).then(|| map.clone())
    }

    /// Waits up to `limit` for the first answer: what a caller that needs pods at once (the
    /// tests) waits on; the sampling loop never waits, and names pods from the answer on.
    pub fn wait_for_answer(&self, limit: Duration) -> Option<Arc<PodMap>> {
        let deadline = Instant::now() + limit;
        let (lock, wake) = &*self.shared;
        let mut latest = lock.lock().ok()?;
        while latest.map.is_none() {
            let left = deadline.checked_duration_since(Instant::now())?;
            latest = wake.wait_timeout(latest, left).ok()?.0;
        }
        drop(latest);
        self.current()
    }
}

impl Drop for PodWatcher {
    fn drop(&mut self) {
        let (lock, wake) = &*self.shared;
        if let Ok(mut latest) = lock.lock() {
            latest.stop = true;
        }
        wake.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The watcher's thread: one call every [`POLL`] until stopped. Says when the kubelet starts
/// or stops answering, not at every call.
fn watch(socket: &Path, shared: &(Mutex<Latest>, Condvar)) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            tracing::warn!(error = %KubeletError::Runtime(error), "pods not attributed");
            return;
        }
    };
    let (lock, wake) = shared;
    let mut answering = None;
    loop {
        let outcome = runtime.block_on(list(socket));
        let Ok(mut latest) = lock.lock() else { return };
        match outcome {
            Ok(response) => {
                let map = PodMap::new(&response);
                if answering != Some(true) {
                    tracing::info!(
                        socket = %socket.display(),
                        pods_with_gpus = map.pods(),
                        "kubelet PodResources answering; pods attributed to their GPUs"
                    );
                }
                answering = Some(true);
                latest.map = Some((Instant::now(), Arc::new(map)));
                wake.notify_all();
            }
            Err(error) => {
                if answering != Some(false) {
                    tracing::warn!(%error, "kubelet PodResources not answering; asking again every 10 s");
                }
                answering = Some(false);
            }
        }
        let deadline = Instant::now() + POLL;
        while !latest.stop {
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                break;
            };
            latest = match wake.wait_timeout(latest, left) {
                Ok((guard, _)) => guard,
                Err(_) => return,
            };
        }
        if latest.stop {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container(name: &str, resource: &str, ids: &[&str]) -> ContainerResources {
        ContainerResources {
            name: name.into(),
            devices: vec![ContainerDevices {
                resource_name: resource.into(),
                device_ids: ids.iter().map(|s| s.to_string()).collect(),
            }],
        }
    }

    fn pod(name: &str, containers: Vec<ContainerResources>) -> PodResources {
        PodResources {
            name: name.into(),
            namespace: "ml".into(),
            containers,
        }
    }

    fn holder(pod: &str, container: &str) -> PodContainer {
        PodContainer {
            pod: pod.into(),
            namespace: "ml".into(),
            container: container.into(),
        }
    }

    #[test]
    fn device_ids_name_gpus_by_uuid_replica_minor_or_index() {
        let uuid = |s: &str| Some(DeviceKey::Uuid(s.into()));
        assert_eq!(DeviceKey::parse("GPU-8f1c"), uuid("GPU-8f1c"));
        assert_eq!(DeviceKey::parse("GPU-8f1c::3"), uuid("GPU-8f1c"));
        assert_eq!(DeviceKey::parse("MIG-2d07"), uuid("MIG-2d07"));
        assert_eq!(DeviceKey::parse("nvidia2"), Some(DeviceKey::Minor(2)));
        assert_eq!(DeviceKey::parse("5"), Some(DeviceKey::Index(5)));
        assert_eq!(DeviceKey::parse("0:1"), None);
        assert_eq!(DeviceKey::parse("nvidia0/gi1"), None);
    }

    #[test]
    fn each_gpu_gets_the_containers_its_device_ids_name() {
        let response = ListPodResourcesResponse {
            pod_resources: vec![
                pod(
                    "trainer-0",
                    vec![
                        container("trainer", "nvidia.com/gpu", &["GPU-a", "GPU-b"]),
                        container("sidecar", "example.com/nic", &["GPU-c"]),
                    ],
                ),
                // Time-slicing: two pods on replicas of GPU-c.
                pod(
                    "notebook-1",
                    vec![container("lab", "nvidia.com/gpu", &["GPU-c::0"])],
                ),
                pod(
                    "notebook-2",
                    vec![container("lab", "nvidia.com/gpu", &["GPU-c::1"])],
                ),
                pod(
                    "gke",
                    vec![container("main", "nvidia.com/gpu", &["nvidia3"])],
                ),
            ],
        };
        let map = PodMap::new(&response);
        let by_uuid = |u: &str| GpuIds {
            uuid: Some(u.into()),
            ..GpuIds::default()
        };
        assert_eq!(
            map.holders(&by_uuid("GPU-a")),
            vec![holder("trainer-0", "trainer")]
        );
        assert_eq!(
            map.holders(&by_uuid("GPU-b")),
            map.holders(&by_uuid("GPU-a"))
        );
        // The NIC resource named a GPU's UUID: only NVIDIA resources count.
        assert_eq!(
            map.holders(&by_uuid("GPU-c")),
            vec![holder("notebook-1", "lab"), holder("notebook-2", "lab")]
        );
        let gke = GpuIds {
            uuid: Some("GPU-d".into()),
            minor_number: Some(3),
            index: Some(0),
        };
        assert_eq!(map.holders(&gke), vec![holder("gke", "main")]);
        assert_eq!(map.holders(&by_uuid("GPU-z")), vec![]);
        assert_eq!(map.pods(), 4);
    }

    #[test]
    fn without_a_socket_the_watcher_is_off() {
        assert!(PodWatcher::start(Path::new("/nonexistent/kubelet.sock")).is_none());
    }
}
