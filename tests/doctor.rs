//! `gpuslack doctor` on this machine (no GPU: it says so and exits 69) and against what a node
//! reaches: a kubelet speaking the PodResources protocol, an unreadable /proc, and collectors
//! that refuse the connection, fail TLS, refuse the key, or accept.

mod common;

use std::process::Command;

use common::{
    free_port, gpuslack, start_podresources, start_rotel, start_stub, start_stub_with, temp_dir,
};
use serde_json::{json, Value};

/// The finding lines of a human report, each `mark area detail`.
fn line<'a>(stdout: &'a str, area: &str) -> Vec<&'a str> {
    stdout
        .lines()
        .filter(|l| {
            l.get(6..)
                .is_some_and(|rest| rest.starts_with(&format!("{area:<11} ")))
        })
        .collect()
}

fn json_findings(args: &[&str]) -> (i32, Vec<Value>) {
    let mut all = vec!["doctor", "--format", "json"];
    all.extend_from_slice(args);
    let out = gpuslack(&all, &[]);
    let doc: Value = serde_json::from_slice(&out.stdout).expect("doctor --format json is JSON");
    assert_eq!(doc["schema"], "gpuslack.doctor.v1");
    let findings = doc["findings"].as_array().cloned().unwrap_or_default();
    (out.status.code().unwrap_or(-1), findings)
}

fn finding<'a>(findings: &'a [Value], area: &str) -> &'a Value {
    findings
        .iter()
        .find(|f| f["area"] == area)
        .unwrap_or_else(|| panic!("no {area} finding in {findings:?}"))
}

#[test]
fn without_a_gpu_it_says_so_with_the_fix_and_exits_69() {
    let out = gpuslack(&["doctor"], &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(69), "{stdout}");
    let nvml = line(&stdout, "nvml");
    assert_eq!(nvml.len(), 1, "{stdout}");
    assert!(
        nvml[0].starts_with("FAIL  nvml        NVML could not be loaded"),
        "{stdout}"
    );
    assert!(
        stdout.contains("fix: install the NVIDIA driver"),
        "{stdout}"
    );
    assert!(line(&stdout, "host")[0].contains("glibc 2."), "{stdout}");
    assert!(
        stdout.ends_with(": no GPU can be watched on this node\n"),
        "{stdout}"
    );
    // Nothing else configured: those checks are skipped, not failed.
    for area in ["otlp", "prometheus", "kubelet"] {
        assert!(
            line(&stdout, area)[0].starts_with("skip "),
            "{area}: {stdout}"
        );
    }
    let (code, findings) = json_findings(&[]);
    assert_eq!(code, 69);
    assert_eq!(finding(&findings, "nvml")["status"], "failed");
}

#[test]
fn a_kubelet_socket_is_asked_and_its_pods_counted() {
    let dir = temp_dir("doctor-kubelet");
    let pods = json!({"podResources": [
        {"name": "trainer-0", "namespace": "ml", "containers": [{"name": "t", "devices": [
            {"resourceName": "nvidia.com/gpu", "deviceIds": ["GPU-0"]}]}]},
        {"name": "router", "namespace": "net", "containers": [{"name": "nic", "devices": [
            {"resourceName": "example.com/nic", "deviceIds": ["nic0"]}]}]}
    ]});
    let (_kubelet, socket, calls) = start_podresources(&dir, &pods);
    let socket = socket.display().to_string();
    let (_, findings) = json_findings(&["--kubelet-socket", &socket]);
    let kubelet = finding(&findings, "kubelet");
    assert_eq!(kubelet["status"], "ok", "{kubelet}");
    assert_eq!(
        kubelet["detail"],
        format!("the kubelet at {socket} answers: 2 pods, 1 holding NVIDIA devices")
    );
    assert!(std::fs::read_to_string(calls).is_ok_and(|c| c.lines().count() == 1));
    // A socket named on the command line that nobody serves fails, with the fix.
    let gone = dir.join("gone.sock").display().to_string();
    let (_, findings) = json_findings(&["--kubelet-socket", &gone]);
    let kubelet = finding(&findings, "kubelet");
    assert_eq!(kubelet["status"], "failed", "{kubelet}");
    assert!(kubelet["fix"]
        .as_str()
        .is_some_and(|f| f.contains("pod-resources")));
}

#[test]
fn processes_it_cannot_read_are_named_with_what_attribution_loses() {
    // As an unprivileged user, other users' environments are closed: run doctor as `nobody`
    // where this test runs as root (CI), or as the user it is otherwise.
    let root = unsafe_is_root();
    let mut cmd = if root {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"]);
        c.arg(env!("CARGO_BIN_EXE_gpuslack"));
        c
    } else {
        Command::new(env!("CARGO_BIN_EXE_gpuslack"))
    };
    let out = cmd.args(["doctor"]).output().expect("doctor runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let processes = line(&stdout, "processes");
    assert_eq!(processes.len(), 1, "{stdout}");
    assert!(
        processes[0].starts_with("WARN  processes   environment unreadable for "),
        "{stdout}"
    );
    assert!(
        processes[0].contains("their ranks, Slurm job and rendezvous key (environment)"),
        "{stdout}"
    );
    assert!(stdout.contains("fix: run the agent as root"), "{stdout}");
    // Root whose /proc still hides a process's environment (a dropped capability, hidepid):
    // the fix never asks root to run as root.
    if root {
        let fake =
            std::env::temp_dir().join(format!("gpuslack-doctor-proc-{}", std::process::id()));
        std::fs::create_dir_all(fake.join("4242")).expect("fake /proc");
        std::fs::write(fake.join("4242/comm"), "python3\n").expect("comm");
        std::fs::write(fake.join("4242/cgroup"), "0::/\n").expect("cgroup");
        let out = Command::new(env!("CARGO_BIN_EXE_gpuslack"))
            .args(["doctor", "--proc-root"])
            .arg(&fake)
            .output()
            .expect("doctor runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let processes = line(&stdout, "processes");
        assert!(
            processes[0].contains("environment unreadable for 1 of 1 processes (PIDs 4242)"),
            "{stdout}"
        );
        assert!(!stdout.contains("run the agent as root"), "{stdout}");
        assert!(
            stdout.contains("fix: already root: give the agent CAP_SYS_PTRACE"),
            "{stdout}"
        );
        std::fs::remove_dir_all(&fake).ok();
    }
    // A /proc that is not there at all.
    let (_, findings) = json_findings(&["--proc-root", "/nonexistent-proc"]);
    let f = finding(&findings, "processes");
    assert_eq!(f["status"], "degraded");
    assert!(f["detail"]
        .as_str()
        .is_some_and(|d| d.starts_with("/nonexistent-proc cannot be listed")));
}

fn unsafe_is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

#[test]
fn the_collector_is_probed_with_one_empty_export() {
    // Refused: nothing listens.
    let closed = format!("http://127.0.0.1:{}", free_port());
    let (_, findings) = json_findings(&[
        "--otlp-endpoint",
        &closed,
        "--otlp-protocol",
        "http/protobuf",
    ]);
    let otlp = finding(&findings, "otlp");
    assert_eq!(otlp["status"], "failed", "{otlp}");
    assert!(
        otlp["detail"].as_str().is_some_and(
            |d| d.ends_with("cannot connect (refused, no route, or the name does not resolve)")
        ),
        "{otlp}"
    );

    // The key refused (401; the stub's gRPC side accepts everything, so HTTP only); the key
    // is never printed.
    let dir = temp_dir("doctor-otlp");
    let (_stub, http, _grpc, _out) = start_stub(&dir, 401);
    let endpoint = format!("http://127.0.0.1:{http}");
    let out = gpuslack(
        &[
            "doctor",
            "--otlp-endpoint",
            &endpoint,
            "--otlp-protocol",
            "http/protobuf",
            "--otlp-header",
            "x-api-key=s3cr3t-key",
        ],
        &[],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let otlp = line(&stdout, "otlp");
    assert!(
        otlp[0].starts_with("FAIL ") && otlp[0].contains("the collector refused the credentials"),
        "{stdout}"
    );
    assert!(!stdout.contains("s3cr3t") && !String::from_utf8_lossy(&out.stderr).contains("s3cr3t"));

    // TLS that fails: a server whose certificate nobody trusts.
    let tls_dir = temp_dir("doctor-tls");
    let (cert, key) = self_signed(&tls_dir);
    let (_tls, https, _, _) = start_stub_with(&tls_dir, 200, Some((&cert, &key)));
    let endpoint = format!("https://127.0.0.1:{https}");
    let (_, findings) = json_findings(&[
        "--otlp-endpoint",
        &endpoint,
        "--otlp-protocol",
        "http/protobuf",
    ]);
    let otlp = finding(&findings, "otlp");
    assert!(
        otlp["detail"]
            .as_str()
            .is_some_and(|d| d.contains("the TLS handshake failed")),
        "{otlp}"
    );
    assert!(
        otlp["fix"]
            .as_str()
            .is_some_and(|f| f.contains("--otlp-ca")),
        "{otlp}"
    );

    // Accepted: a real collector, both protocols.
    let rotel_dir = temp_dir("doctor-rotel");
    let (_rotel, grpc, http, _) = start_rotel(&rotel_dir);
    for (protocol, port) in [("grpc", grpc), ("http/protobuf", http)] {
        let endpoint = format!("http://127.0.0.1:{port}");
        let (_, findings) =
            json_findings(&["--otlp-endpoint", &endpoint, "--otlp-protocol", protocol]);
        let otlp = finding(&findings, "otlp");
        assert_eq!(otlp["status"], "ok", "{protocol}: {otlp}");
        assert!(
            otlp["detail"]
                .as_str()
                .is_some_and(|d| d.ends_with("accepted an empty export")),
            "{otlp}"
        );
    }
}

#[test]
fn a_prometheus_port_in_use_fails() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let addr = taken.local_addr().expect("its address").to_string();
    let (_, findings) = json_findings(&["--prometheus", &addr]);
    let f = finding(&findings, "prometheus");
    assert_eq!(f["status"], "failed", "{f}");
    drop(taken);
    let (_, findings) = json_findings(&["--prometheus", &addr]);
    assert_eq!(finding(&findings, "prometheus")["status"], "ok");
}

/// A self-signed certificate for 127.0.0.1, which no client trusts by default.
fn self_signed(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let out = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "key.pem", "-out",
            "cert.pem",
        ])
        .args([
            "-days",
            "2",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ])
        .current_dir(dir)
        .output()
        .expect("openssl runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (dir.join("cert.pem"), dir.join("key.pem"))
}

/// A collector that answers every request with `answer` (raw bytes, HTTP/1.1 or not), after
/// reading the request's head and body; on a thread, for the test's life.
fn raw_collector(answer: Vec<u8>) -> u16 {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let answer = std::sync::Arc::new(answer);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let answer = answer.clone();
            std::thread::spawn(move || {
                let Ok(mut reader) = stream.try_clone().map(BufReader::new) else {
                    return;
                };
                let mut length = 0usize;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                        length = v.trim().parse().unwrap_or(0);
                    }
                    if line == "\r\n" {
                        break;
                    }
                }
                let mut body = vec![0u8; length];
                let _ = reader.read_exact(&mut body);
                let mut stream = stream;
                let _ = stream.write_all(&answer);
            });
        }
    });
    port
}

#[test]
fn a_collector_that_answers_broken_http_is_named_so_not_unreachable() {
    let mut many = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n".to_vec();
    for i in 0..10_000 {
        many.extend_from_slice(format!("x-h{i}: v\r\n").as_bytes());
    }
    many.extend_from_slice(b"\r\n");
    let mut huge = b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: 5242880\r\n\r\n".to_vec();
    huge.resize(huge.len() + 5 * 1024 * 1024, 0);
    for (what, answer, said) in [
        (
            "a malformed header",
            b"HTTP/1.1 200 OK\r\nno colon here\r\nContent-Length: 0\r\n\r\n".to_vec(),
            "a malformed answer (an invalid status line or header)",
        ),
        (
            "10,000 headers",
            many,
            "a header block too large (too many or too long headers)",
        ),
        ("a body over 4 MiB", huge, "a body over 4 MiB"),
    ] {
        let port = raw_collector(answer);
        let endpoint = format!("http://127.0.0.1:{port}");
        let (_, findings) = json_findings(&[
            "--otlp-endpoint",
            &endpoint,
            "--otlp-protocol",
            "http/protobuf",
        ]);
        let otlp = finding(&findings, "otlp");
        assert_eq!(otlp["status"], "failed", "{what}: {otlp}");
        let detail = otlp["detail"].as_str().unwrap_or("");
        assert!(
            detail.ends_with(&format!(
                "the collector answered, but not in HTTP the exporter can read: {said}"
            )),
            "{what}: {otlp}"
        );
        assert!(!detail.contains("cannot connect"), "{what}: {otlp}");
        // The run files them the same way: the summary's failed exports say `protocol`.
        let out = gpuslack(
            &[
                "run",
                "--replay",
                &common::repo("tests/fixtures/h200-health/samples.csv")
                    .display()
                    .to_string(),
                "--speed",
                "0",
                "--otlp-endpoint",
                &endpoint,
                "--otlp-protocol",
                "http/protobuf",
                "--shutdown-timeout-s",
                "1",
            ],
            &[],
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("protocol×"), "{what}: {err}");
        assert!(!err.contains("network×"), "{what}: {err}");
    }
}

#[test]
fn root_refused_by_the_kernel_is_told_the_capability_not_to_run_as_root() {
    if !unsafe_is_root() {
        return;
    }
    // A process of another user, whose environment root reads only with CAP_SYS_PTRACE.
    let mut other = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--",
            "sleep",
            "30",
        ])
        .spawn()
        .expect("sleep runs");
    std::thread::sleep(std::time::Duration::from_millis(200));
    // Root, with CAP_SYS_PTRACE out of its bounding set: as a container that drops it.
    let out = Command::new("setpriv")
        .args(["--bounding-set=-sys_ptrace", "--"])
        .arg(env!("CARGO_BIN_EXE_gpuslack"))
        .args(["doctor", "--format", "json"])
        .output()
        .expect("doctor runs");
    let _ = other.kill();
    let _ = other.wait();
    let doc: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let findings = doc["findings"].as_array().cloned().unwrap_or_default();
    let f = finding(&findings, "processes");
    assert_eq!(f["status"], "degraded", "{f}");
    assert!(
        f["detail"]
            .as_str()
            .is_some_and(|d| d.contains("running as root but without CAP_SYS_PTRACE")),
        "{f}"
    );
    let fix = f["fix"].as_str().unwrap_or("");
    assert!(fix.starts_with("add CAP_SYS_PTRACE"), "{f}");
    assert!(!fix.contains("run the agent as root"), "{f}");
}

#[test]
fn a_reader_that_leaves_at_once_changes_no_exit_code_in_either_format() {
    for format in ["human", "json"] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_gpuslack"))
            .args(["doctor", "--format", format])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("doctor runs");
        // The reader is gone before a byte is written: every write meets a broken pipe.
        drop(child.stdout.take());
        let status = child.wait().expect("doctor ends");
        // No GPU here: 69, as with a reader.
        assert_eq!(status.code(), Some(69), "--format {format}");
    }
}
