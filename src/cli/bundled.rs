//! The recorded trace shipped inside the binary, so `diagnose` shows a real report on a machine
//! without a GPU. Recorded on an H200 (driver 580, CUDA 13.0) with NVML + GPM at 25 ms.

pub const NAME: &str = "h200-reference (bundled): one NVIDIA H200 running idle, tiny kernels (eager and CUDA graph), a device copy, bf16 and fp32 GEMMs, starved bursts and pinned host→device copies";
pub const SAMPLES_CSV: &[u8] = include_bytes!("../../tests/fixtures/h200-reference/samples.csv");
pub const FACTS_JSON: &str = include_str!("../../tests/fixtures/h200-reference/facts.json");
