//! `bench` and `calibrate`'s sampler: samples every GPU on a background thread while a workload runs, so its figures can be shown
//! beside what the live source saw: GPU-Util, power, SM activity, clocks, throttling.

#![warn(missing_docs)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use serde::Serialize;

use super::ticks::open_nvml;
use super::Cadence;
use crate::device::DeviceFacts;
use crate::usage::unix_now;
use crate::window::ClockReasonCounts;
use crate::{Metric, Sample};

/// A live source sampling on a thread of its own; stops when dropped.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    samples: Arc<Mutex<Vec<Sample>>>,
    facts: Vec<(u32, DeviceFacts)>,
    thread: Option<JoinHandle<()>>,
}

/// Means of what the live source saw over a span of one GPU.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LiveSummary {
    /// Samples in the span.
    pub samples: usize,
    /// Mean GPU-Util (%).
    pub util_gpu_pct: Option<f64>,
    /// Mean power (W).
    pub power_w: Option<f64>,
    /// Mean SM activity (%, GPM).
    pub sm_active_pct: Option<f64>,
    /// Mean tensor-pipe activity (%, GPM).
    pub tensor_pct: Option<f64>,
    /// Mean DRAM bandwidth use (%, GPM).
    pub dram_pct: Option<f64>,
    /// The busiest of the tensor, FP32, FP16 and FP64 pipes over the span (GPM), as the
    /// diagnosis names it: with SM activity high and every pipe and DRAM low, the SMs wait.
    pub busiest_pipe: Option<&'static str>,
    /// Its mean activity (%, GPM).
    pub busiest_pipe_pct: Option<f64>,
    /// Mean PCIe receive rate (MiB/s, GPM).
    pub pcie_rx_mib_s: Option<f64>,
    /// Mean SM clock (MHz).
    pub sm_mhz: Option<f64>,
    /// Highest temperature (°C).
    pub temp_c_max: Option<f64>,
    /// Clock-event reasons seen in at least a quarter of the samples (GPU idle left out).
    pub throttle: Vec<&'static str>,
}

impl Sampler {
    /// Starts sampling at 100 ms, GPM left out if `no_gpm`; `None` (with the reason logged)
    /// where NVML is not available.
    pub fn start(no_gpm: bool) -> Option<Sampler> {
        let mut source = match open_nvml(Cadence::every(Duration::from_millis(100)), no_gpm) {
            Ok(source) => source,
            Err(e) => {
                tracing::warn!(error = %e, "no live readings beside the benchmark figures");
                return None;
            }
        };
        let facts = source.facts();
        let stop = Arc::new(AtomicBool::new(false));
        let samples = Arc::new(Mutex::new(Vec::new()));
        let thread = {
            let (stop, samples) = (stop.clone(), samples.clone());
            std::thread::spawn(move || {
                let tick = Duration::from_millis(100);
                while !stop.load(Ordering::Relaxed) {
                    let batch = source.sample(unix_now);
                    if let Ok(mut all) = samples.lock() {
                        all.extend(batch);
                    }
                    std::thread::sleep(tick);
                }
            })
        };
        Some(Sampler {
            stop,
            samples,
            facts,
            thread: Some(thread),
        })
    }

    /// Facts of every GPU, as read when sampling started.
    pub fn facts(&self) -> &[(u32, DeviceFacts)] {
        &self.facts
    }

    /// Every sample so far (a calibration keeps its few minutes of samples).
    pub fn samples(&self) -> Vec<Sample> {
        self.samples.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// The latest temperature of `gpu`, for cool-downs.
    pub fn temperature(&self, gpu: u32) -> Option<f64> {
        let all = self.samples.lock().ok()?;
        all.iter()
            .rev()
            .filter(|s| s.gpu == gpu)
            .find_map(|s| s.get(Metric::TempC))
    }

    /// What GPU `gpu` looked like between `start` and `end` (unix seconds), leaving out the first
    /// `settle_s` while power and clocks ramp.
    pub fn summary(&self, gpu: u32, start: f64, end: f64, settle_s: f64) -> LiveSummary {
        let Ok(all) = self.samples.lock() else {
            return LiveSummary::default();
        };
        let from = (start + settle_s).min(end);
        let span: Vec<&Sample> = all
            .iter()
            .filter(|s| s.gpu == gpu && s.t >= from && s.t <= end)
            .collect();
        let mean = |m: Metric| {
            let v: Vec<f64> = span.iter().filter_map(|s| s.get(m)).collect();
            (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
        };
        let mut reasons = ClockReasonCounts::default();
        span.iter()
            .filter_map(|s| s.clk_reasons)
            .for_each(|m| reasons.add(m));
        let throttle = reasons.throttling(0.25);
        let busiest = [
            (Metric::GpmTensor, "tensor"),
            (Metric::GpmFp32, "fp32"),
            (Metric::GpmFp16, "fp16"),
            (Metric::GpmFp64, "fp64"),
        ]
        .into_iter()
        .filter_map(|(m, name)| mean(m).map(|v| (name, v)))
        .max_by(|a, b| a.1.total_cmp(&b.1));
        LiveSummary {
            samples: span.len(),
            util_gpu_pct: mean(Metric::UtilGpu),
            power_w: mean(Metric::PowerMw).map(|mw| mw / 1000.0),
            sm_active_pct: mean(Metric::GpmSm),
            tensor_pct: mean(Metric::GpmTensor),
            dram_pct: mean(Metric::GpmDram),
            busiest_pipe: busiest.map(|(name, _)| name),
            busiest_pipe_pct: busiest.map(|(_, v)| v),
            pcie_rx_mib_s: mean(Metric::GpmPcieRx),
            sm_mhz: mean(Metric::SmMhz),
            temp_c_max: span
                .iter()
                .filter_map(|s| s.get(Metric::TempC))
                .reduce(f64::max),
            throttle,
        }
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sampler holding `samples`, with no thread behind it.
    fn holding(samples: Vec<Sample>) -> Sampler {
        Sampler {
            stop: Arc::new(AtomicBool::new(true)),
            samples: Arc::new(Mutex::new(samples)),
            facts: Vec::new(),
            thread: None,
        }
    }

    /// A random gather as GPM saw it on an H200: every SM busy, the FP32 pipe at a few %, no
    /// tensor work, DRAM at half its peak. The busiest pipe is named with its mean, and the
    /// settling time and the other GPU are left out.
    #[test]
    fn the_busiest_pipe_is_named_with_its_mean_over_the_span() {
        let mut samples = Vec::new();
        for i in 0..20 {
            let t = 100.0 + 0.1 * f64::from(i);
            let fp32 = if i < 5 { 90.0 } else { 3.5 };
            samples.push(
                Sample::new(t, 0)
                    .with(Metric::GpmSm, 99.0)
                    .with(Metric::GpmFp32, fp32)
                    .with(Metric::GpmTensor, 0.0)
                    .with(Metric::GpmFp64, 0.5)
                    .with(Metric::GpmDram, 50.0),
            );
            samples.push(Sample::new(t, 1).with(Metric::GpmTensor, 95.0));
        }
        let s = holding(samples).summary(0, 100.0, 102.0, 0.5);
        assert_eq!(s.busiest_pipe, Some("fp32"));
        let pct = s.busiest_pipe_pct.expect("mean");
        assert!((pct - 3.5).abs() < 1e-9, "{pct}");
        assert_eq!(s.dram_pct, Some(50.0));
        // Without GPM, no pipe is named.
        let nvml_only = holding(vec![Sample::new(100.0, 0).with(Metric::PowerMw, 300_000.0)]);
        let s = nvml_only.summary(0, 99.0, 101.0, 0.0);
        assert_eq!((s.busiest_pipe, s.busiest_pipe_pct), (None, None));
    }
}
