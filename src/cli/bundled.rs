//! The recorded trace shipped inside the binary, so `diagnose` shows a real report on a machine
//! without a GPU: `gpuslack record` beside a PyTorch job on an H200 (driver 580, NVML + GPM at
//! 50 ms; docs/REPORT-H200.md), chosen because it carries what a first run should see: the
//! process list (whose job: pid 499 python3, job `pgid:485`), the health counters (is the
//! hardware sound) and a power-cap throttle, beside idle, held, tiny-kernel, GEMM and starved
//! phases. Nothing in it is composed: it is tests/fixtures/h200-diagnose-job as recorded.

pub const NAME: &str =
    "h200-diagnose-job (bundled): a PyTorch job on an H200, its processes and health counters";
pub const LABEL: &str = "<bundled h200-diagnose-job>";
pub const SAMPLES_CSV: &[u8] = include_bytes!("../../tests/fixtures/h200-diagnose-job/samples.csv");
pub const FACTS_JSON: &str =
    include_str!("../../tests/fixtures/h200-diagnose-job/samples.facts.json");
