//! The recorded trace shipped inside the binary, so `diagnose` shows a real report on a machine
//! without a GPU: `gpuslack record --interval-ms 50` beside a PyTorch job on an H100 (driver
//! 580, NVML + GPM; tests/fixtures/h100-diagnose-job/README.md), chosen because it shows the
//! pitch: for 14 s GPU-Util reads 100% while 0.8% of the SMs work and the board draws 128 W of
//! its 700 W (a hand-written reduction launched with one block), beside the same sum done by
//! torch.sum, bf16 GEMMs and bursts starved of input. It carries the process list (whose job:
//! pid 519 python3, job `pgid:518`) and the health counters. Nothing in it is composed: it is
//! the fixture as recorded, its phases labelled from Nsight Compute and the job's own rates.

pub const NAME: &str =
    "h100-diagnose-job (bundled): a PyTorch job on an H100, its processes and health counters";
pub const LABEL: &str = "<bundled h100-diagnose-job>";
pub const SAMPLES_CSV: &[u8] = include_bytes!("../../tests/fixtures/h100-diagnose-job/samples.csv");
pub const FACTS_JSON: &str =
    include_str!("../../tests/fixtures/h100-diagnose-job/samples.facts.json");
