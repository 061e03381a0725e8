//! The container image built here from Debian packages (issue #49): deploy/container/
//! build-debian.sh makes the base with mmdebstrap from the Debian archive, builds
//! Containerfile.debian on it with podman (vfs storage, chroot isolation), then starts the image,
//! replays `h200-diagnose-job` in it with `--metrics dcgm` and asks its /metrics. Needs
//! GPUSLACK_PODMAN (podman, with mmdebstrap and runc beside it, and the Debian archive
//! reachable: scripts/test.sh installs them); about two minutes, most of it mmdebstrap.

mod common;

use std::process::Command;

use common::{free_port, repo, tool};

#[test]
fn the_image_built_from_debian_packages_replays_a_fixture_and_answers_metrics() {
    let podman = tool("GPUSLACK_PODMAN");
    let port = free_port();
    let out = Command::new(repo("deploy/container/build-debian.sh"))
        .arg("--smoke")
        .arg(env!("CARGO_BIN_EXE_gpuslack"))
        .env("PODMAN", &podman)
        .env("GPUSLACK_SMOKE_PORT", port.to_string())
        .env("GPUSLACK_TAG", "test")
        .output()
        .expect("build-debian.sh runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("built localhost/gpuslack:test"), "{stdout}");
    // The recording's last window, read in the container: the idle H200 at 78.272 W.
    let power = stdout
        .lines()
        .find(|l| l.starts_with("DCGM_FI_DEV_POWER_USAGE{"))
        .unwrap_or_else(|| panic!("no power in the image's scrape: {stdout}"));
    assert!(power.ends_with(" 78.272"), "{power}");
    assert!(power.contains("modelName=\"NVIDIA H200\""), "{power}");
    assert!(
        stdout.contains("gpuslack_diagnosis_ratio{gpuslack_diagnosis_class=\"idle\""),
        "{stdout}"
    );
    // The image holds the binary it was given, on a base no registry supplied.
    let history = Command::new(&podman)
        .args(["--storage-driver", "vfs", "image", "inspect"])
        .args(["--format", "{{.Config.Entrypoint}} {{.Config.Cmd}}"])
        .arg("localhost/gpuslack:test")
        .output()
        .expect("podman runs");
    let inspected = String::from_utf8_lossy(&history.stdout);
    assert!(
        inspected.contains("/usr/local/bin/gpuslack") && inspected.contains("127.0.0.1:9464"),
        "{inspected}"
    );
}
