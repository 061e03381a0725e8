"""Checks that deploy/kubernetes/*.yaml parse and that the DaemonSet carries what a GPU node
agent needs. Prints one line per problem and exits 1 if there is any. Run by tests/deploy.rs
with the test venv's Python (PyYAML).

With --print-config first, prints the ConfigMap's gpuslack.toml and the environment the
DaemonSet sets by default (plain values only: `NAME=VALUE` lines after a `# env` line), for
tests/deploy.rs to run the agent as a pod would."""
import sys
import tomllib

import yaml

print_config = sys.argv[1:2] == ["--print-config"]
if print_config:
    sys.argv.pop(1)

problems = []


def need(cond, what):
    if not cond:
        problems.append(what)


docs = []
texts = {}
for path in sys.argv[1:]:
    with open(path) as f:
        texts[path] = f.read()
    with open(path) as f:
        for doc in yaml.safe_load_all(f):
            if doc is not None:
                need("apiVersion" in doc and "kind" in doc, f"{path}: a document without apiVersion/kind")
                docs.append(doc)

kinds = {d["kind"]: d for d in docs}
for kind in ["Namespace", "ServiceAccount", "ConfigMap", "DaemonSet", "Secret", "Service"]:
    need(kind in kinds, f"no {kind}")
ds = kinds.get("DaemonSet", {})
spec = ds.get("spec", {})
pod = spec.get("template", {}).get("spec", {})
need(spec.get("selector", {}).get("matchLabels") == spec.get("template", {}).get("metadata", {}).get("labels"),
     "the selector does not match the pod labels")
containers = pod.get("containers", [])
need(len(containers) == 1, "one container")
c = containers[0] if containers else {}
env = {e["name"]: e for e in c.get("env", [])}
need(env.get("K8S_NODE_NAME", {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "spec.nodeName",
     "K8S_NODE_NAME from spec.nodeName")
need(env.get("HOST_IP", {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "status.hostIP",
     "HOST_IP from status.hostIP")
# OTLP is opt-in: on a Prometheus-only cluster an endpoint set by default fails every export
# (and /healthz after 6). Neither the environment nor the shipped config file names one.
for name in env:
    need(not (name.startswith("OTEL_EXPORTER_OTLP") and name.endswith("ENDPOINT")),
         f"{name} set by default: OTLP must be opt-in")
need("GPUSLACK_PRESET" not in env or "value" not in env["GPUSLACK_PRESET"], "a preset set by default")
ds_text = texts.get(sys.argv[1], "") if len(sys.argv) > 1 else ""
need("# - name: OTEL_EXPORTER_OTLP_ENDPOINT" in ds_text and "#   value: http://$(HOST_IP):4317" in ds_text,
     "the node-local endpoint as a commented variant")
need(env.get("NVIDIA_VISIBLE_DEVICES", {}).get("value") == "all", "NVIDIA_VISIBLE_DEVICES=all")
for key in ["DD_API_KEY", "HONEYCOMB_API_KEY"]:
    ref = env.get(key, {}).get("valueFrom", {}).get("secretKeyRef", {})
    need(ref.get("name") == kinds.get("Secret", {}).get("metadata", {}).get("name"), f"{key} from the Secret")
    need("value" not in env.get(key, {}), f"{key} written in the manifest")
mounts = {m["mountPath"]: m for m in c.get("volumeMounts", [])}
volumes = {v["name"]: v for v in pod.get("volumes", [])}
pr = mounts.get("/var/lib/kubelet/pod-resources")
need(pr is not None and pr.get("readOnly") is True, "the PodResources socket directory mounted read-only")
if pr:
    host = volumes.get(pr["name"], {}).get("hostPath", {})
    need(host.get("path") == "/var/lib/kubelet/pod-resources", "the PodResources mount is the kubelet's hostPath")
    # `Directory` keeps the pod from starting on a node without it; pods are then just not looked up.
    need(host.get("type") in (None, "", "DirectoryOrCreate"),
         f"the PodResources hostPath must not require the directory (type {host.get('type')!r})")
cfg = mounts.get("/etc/gpuslack")
need(cfg is not None and volumes.get(cfg["name"], {}).get("configMap", {}).get("name") == kinds.get("ConfigMap", {}).get("metadata", {}).get("name"),
     "the ConfigMap mounted at /etc/gpuslack")
need("/etc/gpuslack/gpuslack.toml" in c.get("args", []), "the agent reads the mounted config")
need("gpuslack.toml" in kinds.get("ConfigMap", {}).get("data", {}), "the ConfigMap holds gpuslack.toml")
try:
    shipped = tomllib.loads(kinds.get("ConfigMap", {}).get("data", {}).get("gpuslack.toml", ""))
except tomllib.TOMLDecodeError as e:
    shipped = {}
    problems.append(f"gpuslack.toml does not parse: {e}")
otlp = shipped.get("otlp", {})
need("endpoint" not in otlp and "preset" not in otlp, f"OTLP on by default in gpuslack.toml: {otlp}")
for variant in ['# preset = "datadog"', '# preset = "honeycomb"', '# endpoint = "']:
    need(variant in kinds.get("ConfigMap", {}).get("data", {}).get("gpuslack.toml", ""),
         f"the commented variant {variant!r} in gpuslack.toml")
ports = {p.get("name"): p for p in c.get("ports", [])}
need(ports.get("metrics", {}).get("containerPort") == 9464, "the metrics port 9464")
# /metrics and /healthz on the pod's IP alone (docs/DEPLOY.md): from the downward API, in the
# args; the config file does not name an address of its own, 0.0.0.0 least of all.
need(env.get("POD_IP", {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "status.podIP",
     "POD_IP from status.podIP")
args = c.get("args", [])
listen = args[args.index("--prometheus") + 1] if "--prometheus" in args[:-1] else None
need(listen == "$(POD_IP):9464", f"--prometheus $(POD_IP):9464 in the args, not {listen}")
config = kinds.get("ConfigMap", {}).get("data", {}).get("gpuslack.toml", "")
need("0.0.0.0" not in config and "[prometheus]" not in config, "no listen address in the config file")
need("--wait-for-driver" in args, "the agent waits for a driver that comes up after it (--wait-for-driver)")
for probe, path in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz"), ("startupProbe", "/healthz")]:
    need(c.get(probe, {}).get("httpGet", {}).get("path") == path, f"{probe} on {path}")
    # The kubelet probes the pod's IP unless told a host: the address the agent listens on.
    need("host" not in c.get(probe, {}).get("httpGet", {}), f"{probe} at the pod's IP")
# Root only as the owner of the kubelet's socket: every capability dropped, else non-root.
caps = c.get("securityContext", {}).get("capabilities", {})
need(caps.get("drop") == ["ALL"] and not caps.get("add"), "every capability dropped")
uid = pod.get("securityContext", {}).get("runAsUser")
need(pod.get("securityContext", {}).get("runAsNonRoot") is True or (uid == 0 and pr is not None),
     "non-root, or uid 0 for the PodResources socket alone")
need(c.get("securityContext", {}).get("allowPrivilegeEscalation") is False, "no privilege escalation")
need("limits" in c.get("resources", {}), "resource limits")
need(any(t.get("key") == "nvidia.com/gpu" for t in pod.get("tolerations", [])), "tolerates the GPU taint")
need(pod.get("hostPID") is True, "hostPID, to name NVML's processes")
need(pod.get("runtimeClassName") == "nvidia", "the NVIDIA runtime class")
# The GPU Feature Discovery label selects nothing where GFD does not run: say so, and give the
# label an admin sets by hand.
if "nvidia.com/gpu.present" in pod.get("nodeSelector", {}):
    need("GPU Feature Discovery" in ds_text and "kubectl label node" in ds_text,
         "the nvidia.com/gpu.present selector without a word on GPU Feature Discovery and the alternative")

if print_config and not problems:
    print(kinds["ConfigMap"]["data"]["gpuslack.toml"], end="")
    print("# env")
    for name, e in env.items():
        if "value" in e:
            print(f"{name}={e['value']}")

for p in problems:
    print(p)
sys.exit(1 if problems else 0)
