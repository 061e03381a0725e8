//! Pods from the kubelet: gpuslack's PodResources client against a server speaking the
//! kubelet's v1 protocol (grpcio, compiled from the kubelet's proto), and the pods it names
//! arriving as attributes on the right GPU.

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use common::{requests, start_podresources, temp_dir};
use gpuslack_receiver::attribution::kubelet::{self, GpuIds, PodWatcher};
use gpuslack_receiver::attribution::procfs::Procfs;
use gpuslack_receiver::attribution::{Attributor, PodContainer};
use gpuslack_receiver::export::point::owner_attributes;
use gpuslack_receiver::export::selection::{MetricSet, Selection};
use gpuslack_receiver::export::ExportState;
use gpuslack_receiver::trace::{TraceFacts, TraceReader};
use gpuslack_receiver::{Diagnoser, Pipeline, Thresholds};
use serde_json::json;

/// The two-GPU recording's GPUs, as the kubelet's List names them: GPU 1 to one training pod
/// (with the CPU, memory, topology and DRA fields a kubelet also sends, which the client must
/// skip); GPU 0 time-sliced between two notebooks, replicas `::0` and `::1`; a NIC whose ID
/// happens to be GPU 0's UUID, which is not an NVIDIA resource and must not count.
fn kubelet_answer(gpu0: &str, gpu1: &str) -> serde_json::Value {
    let numa = json!({"nodes": [{"ID": 1}]});
    json!({"podResources": [
        {"name": "trainer-0", "namespace": "ml", "cpuIds": [4, 5],
         "containers": [{
            "name": "trainer",
            "devices": [{"resourceName": "nvidia.com/gpu", "deviceIds": [gpu1], "topology": numa}],
            "cpuIds": [4, 5],
            "memory": [{"memoryType": "memory", "size": "1073741824", "topology": numa}],
            "dynamicResources": [{"claimName": "scratch", "claimNamespace": "ml",
                "claimResources": [{"cdiDevices": [{"name": "example.com/disk=0"}],
                    "driverName": "disk.example.com", "poolName": "node", "deviceName": "d0"}]}]
         }]},
        {"name": "notebook-a", "namespace": "research",
         "containers": [{"name": "lab", "devices": [
            {"resourceName": "nvidia.com/gpu", "deviceIds": [format!("{gpu0}::0")]}]}]},
        {"name": "notebook-b", "namespace": "research",
         "containers": [{"name": "lab", "devices": [
            {"resourceName": "nvidia.com/gpu", "deviceIds": [format!("{gpu0}::1")]}]}]},
        {"name": "router", "namespace": "net",
         "containers": [{"name": "nic", "devices": [
            {"resourceName": "example.com/nic", "deviceIds": [gpu0]}]}]}
    ]})
}

#[test]
fn the_kubelets_pods_reach_the_right_gpus_series() {
    let dir = temp_dir("pods");
    let fixture = common::repo("tests/fixtures/h200x2-calibration/samples.csv");
    let facts = TraceFacts::beside(&fixture)
        .expect("facts")
        .expect("facts file");
    let uuid = |gpu: u32| facts.per_gpu[&gpu].uuid.clone().expect("uuid");
    let (_kubelet, socket, calls) = start_podresources(&dir, &kubelet_answer(&uuid(0), &uuid(1)));

    let watcher = PodWatcher::start(&socket).expect("a socket: watched");
    let map = watcher
        .wait_for_answer(Duration::from_secs(20))
        .expect("the kubelet answers");
    assert_eq!(map.pods(), 3, "the NIC's pod holds no GPU");
    let gpus: HashMap<u32, GpuIds> = facts
        .per_gpu
        .iter()
        .map(|(gpu, f)| {
            let ids = GpuIds {
                uuid: f.uuid.clone(),
                ..GpuIds::default()
            };
            (*gpu, ids)
        })
        .collect();
    let mut attributor = Attributor::new(Procfs::system()).with_pods(watcher, gpus);

    // The recording predates process lists: each row is given an empty one, as the live
    // source's once-a-second list of a GPU nobody runs on.
    let mut diagnoser = Diagnoser::new(Thresholds::default());
    for (gpu, f) in &facts.per_gpu {
        diagnoser.set_facts(*gpu, f.clone());
    }
    let mut pipeline = Pipeline::new(5.0, diagnoser);
    let mut reports = Vec::new();
    for s in TraceReader::open(&fixture).expect("trace").take(4000) {
        let mut s = s.expect("row");
        s.processes = Some(Arc::new(Vec::new()));
        attributor.enrich(&mut s);
        reports.extend(pipeline.push(&s).expect("in order"));
    }
    reports.extend(pipeline.finish());

    let last = |gpu: u32| {
        reports
            .iter()
            .rfind(|r| r.stats.gpu == gpu)
            .unwrap_or_else(|| panic!("no window of GPU {gpu}"))
    };
    let attrs =
        |gpu: u32| -> HashMap<&str, String> { owner_attributes(last(gpu)).into_iter().collect() };
    let gpu1 = attrs(1);
    assert_eq!(gpu1["k8s.pod.name"], "trainer-0");
    assert_eq!(gpu1["k8s.namespace.name"], "ml");
    assert_eq!(gpu1["k8s.container.name"], "trainer");
    // GPU 0 is shared by two pods: both are listed, and neither owns its series.
    let gpu0 = attrs(0);
    assert!(!gpu0.contains_key("k8s.pod.name"), "{gpu0:?}");
    let lab = |pod: &str| PodContainer {
        pod: pod.into(),
        namespace: "research".into(),
        container: "lab".into(),
    };
    assert_eq!(
        last(0).stats.pods.as_deref(),
        Some(&vec![lab("notebook-a"), lab("notebook-b")])
    );
    // The dcgm set puts the owner's pod on every series of its GPU, as dcgm-exporter does:
    // dcgm-exporter's names on its fields, the semantic conventions' on gpuslack's gauges. The
    // time-sliced GPU has no one owner, and no pod on its series.
    let selection = Selection::new(MetricSet::Dcgm, &[], &[]).expect("the dcgm set");
    let mut state = ExportState::default().with_selection(selection);
    for r in &reports {
        state.update(r, &facts.per_gpu[&r.stats.gpu]);
    }
    let points = state.points();
    let mut fields = [0, 0];
    for p in points.iter() {
        let a: HashMap<&str, &str> = p.attributes.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let dcgm = p.def.name.starts_with("DCGM_");
        let gpu = if dcgm {
            a["gpu"]
        } else {
            a["gpuslack.gpu.index"]
        };
        let (pod, namespace, container) = if dcgm {
            ("pod", "namespace", "container")
        } else {
            ("k8s.pod.name", "k8s.namespace.name", "k8s.container.name")
        };
        if dcgm {
            fields[usize::from(gpu == "1")] += 1;
        }
        if p.def.name != "gpuslack.diagnosis" && !dcgm {
            continue;
        }
        if gpu == "1" {
            assert_eq!(a.get(pod), Some(&"trainer-0"), "{}: {a:?}", p.def.name);
            assert_eq!(a.get(namespace), Some(&"ml"), "{}", p.def.name);
            assert_eq!(a.get(container), Some(&"trainer"), "{}", p.def.name);
        } else {
            assert!(!a.contains_key(pod), "{}: {a:?}", p.def.name);
        }
    }
    assert!(fields[0] > 20 && fields[1] > 20, "{fields:?}");
    let methods: Vec<String> = requests(&calls)
        .iter()
        .filter_map(|c| c["method"].as_str().map(String::from))
        .collect();
    assert!(
        !methods.is_empty() && methods.iter().all(|m| m == "List"),
        "{methods:?}"
    );
}

#[test]
fn a_kubelet_socket_nobody_serves_names_no_pods() {
    let dir = temp_dir("pods-dead");
    let socket = dir.join("kubelet.sock");
    // A socket file left by a kubelet that has gone: it exists, and refuses connections.
    drop(std::os::unix::net::UnixListener::bind(&socket).expect("bind"));
    let watcher = PodWatcher::start(&socket).expect("a socket: watched");
    assert!(watcher.wait_for_answer(Duration::from_secs(3)).is_none());
    assert!(watcher.current().is_none());
    // What the agent logs says why, down to the OS's reason, and where.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let error = runtime
        .block_on(kubelet::list(&socket))
        .expect_err("nobody answers");
    let text = error.to_string();
    assert!(text.contains("Connection refused"), "{text}");
    assert!(text.contains(&socket.display().to_string()), "{text}");
}
