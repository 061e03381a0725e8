//! `run --wait-for-driver` (issue #49): with no NVML at start, a live agent keeps serving, says
//! why on /healthz (alive) and /readyz (not ready), tries again with a backoff, and sees a
//! driver library that appears after it started; a stop while it waits ends the run cleanly.
//! Without the flag the agent exits 69 at once, as before.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, temp_dir, wait_for_port, Server};
use serde_json::Value;

/// `/path` of the agent on `port`: the status code and the JSON body.
fn get(port: u16, path: &str) -> (u16, Value) {
    let out = Command::new("curl")
        .args([
            "-s",
            "-w",
            "\n%{http_code}",
            &format!("http://127.0.0.1:{port}{path}"),
        ])
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (
        code.trim().parse().unwrap_or(0),
        serde_json::from_str(body).unwrap_or(Value::Null),
    )
}

/// Asks `/healthz` until its reason contains `words` (20 s at most): the answer.
fn health_saying(port: u16, words: &str) -> (u16, Value) {
    let started = Instant::now();
    loop {
        let (code, body) = get(port, "/healthz");
        if body["reason"].as_str().is_some_and(|r| r.contains(words)) {
            return (code, body);
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "/healthz never said {words:?}: {code} {body}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn an_agent_waits_for_a_driver_that_appears_late_and_a_stop_ends_the_wait() {
    let dir = temp_dir("late-driver");
    let lib_dir = dir.join("lib");
    std::fs::create_dir_all(&lib_dir).expect("lib dir");
    // A stand-in for the driver's libnvidia-ml.so.1 whose nvmlInit_v2 answers 9
    // (NVML_ERROR_DRIVER_NOT_LOADED): the library installed, its kernel module not loaded yet.
    let source = dir.join("fake_nvml.c");
    std::fs::write(
        &source,
        "int nvmlInit_v2(void) { return 9; }\nint nvmlInit(void) { return 9; }\nint nvmlShutdown(void) { return 0; }\n",
    )
    .expect("source");
    let built = dir.join("libnvidia-ml.so.1");
    let cc = Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&built)
        .arg(&source)
        .status()
        .expect("cc runs");
    assert!(cc.success(), "cc failed");

    // Without the flag: exit 69 at once, nothing waited for.
    let plain = Command::new(env!("CARGO_BIN_EXE_gpuslack"))
        .args(["run", "--seconds", "5"])
        .env("LD_LIBRARY_PATH", &lib_dir)
        .output()
        .expect("gpuslack runs");
    assert_eq!(plain.status.code(), Some(69));

    let port = free_port();
    let agent = Server(
        Command::new(env!("CARGO_BIN_EXE_gpuslack"))
            .args(["run", "--wait-for-driver", "--seconds", "60"])
            .args(["--prometheus", &format!("127.0.0.1:{port}")])
            .env("LD_LIBRARY_PATH", &lib_dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("agent starts"),
    );
    wait_for_port(port, "the waiting agent's endpoint");
    // No library yet: alive (200) and not ready (503), saying why.
    let (code, body) = health_saying(port, "NVML could not be loaded");
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["status"], "waiting_for_driver");
    assert!(
        body["reason"]
            .as_str()
            .is_some_and(|r| r.contains("waiting for the driver: try")),
        "{body}"
    );
    let (code, ready) = get(port, "/readyz");
    assert_eq!(
        (code, ready["status"].as_str()),
        (503, Some("waiting_for_driver"))
    );
    // The library appears: a later try loads it, and now it is the kernel module that is missing.
    std::fs::copy(&built, lib_dir.join("libnvidia-ml.so.1")).expect("the library appears");
    let (code, body) = health_saying(port, "the NVIDIA driver is not loaded");
    assert_eq!(
        (code, body["status"].as_str()),
        (200, Some("waiting_for_driver"))
    );
    // A stop while waiting ends the run cleanly: 0, not 69.
    let mut agent = agent;
    let pid = agent.0.id().to_string();
    let killed = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill");
    assert!(killed.success());
    let started = Instant::now();
    let status = loop {
        if let Some(status) = agent.0.try_wait().expect("wait") {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "no exit on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(status.code(), Some(0));
}
