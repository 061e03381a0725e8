//! A GPU's peak figures (board power, DRAM bandwidth, SMs, dense tensor TFLOP/s, GPM) and where
//! each came from. What NVML reads on the GPU itself wins over the SKU table's published figure
//! (`calibration/src/skus.toml`), and a model the table does not know gets no table figure at
//! all rather than a neighbour's: a wrong peak is worse than none, because the baselines scaled
//! from it and the headroom read against it would be wrong with nothing to say so.
//!
//! The table lives in the calibration crate, which depends on this one: it hands its entry over
//! as [`TableFigures`] and [`DeviceSpec::resolve`] does the rest, so the rule "live beats table"
//! is the same for a live GPU, a trace's facts and `gpuslack doctor`.

use serde::{Deserialize, Serialize};

/// Where one figure came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FigureSource {
    /// Read from the GPU by NVML (a live GPU, or the facts recorded beside a trace).
    Nvml,
    /// The SKU table's published figure.
    Table,
    /// Neither: NVML does not report it and the model is not in the table.
    #[default]
    Unknown,
}

impl FigureSource {
    /// The word the report and the JSON use.
    pub fn as_str(self) -> &'static str {
        match self {
            FigureSource::Nvml => "nvml",
            FigureSource::Table => "table",
            FigureSource::Unknown => "unknown",
        }
    }
}

/// One peak figure, its origin, and whether the table marks it unsure.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Figure<T> {
    /// `None` exactly when the source is [`FigureSource::Unknown`].
    pub value: Option<T>,
    /// Where the value came from.
    pub source: FigureSource,
    /// The table's figure is derived or reported rather than stated by a datasheet
    /// (`unsure` in skus.toml); never set on a figure NVML read.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unsure: bool,
}

impl<T: Copy> Figure<T> {
    fn nvml(value: T) -> Self {
        Figure {
            value: Some(value),
            source: FigureSource::Nvml,
            unsure: false,
        }
    }

    fn table(value: T, unsure: bool) -> Self {
        Figure {
            value: Some(value),
            source: FigureSource::Table,
            unsure,
        }
    }

    /// The live value where there is one, else the table's, else unknown.
    fn pick(live: Option<T>, table: Option<(T, bool)>) -> Self {
        match (live, table) {
            (Some(v), _) => Figure::nvml(v),
            (None, Some((v, unsure))) => Figure::table(v, unsure),
            (None, None) => Figure {
                value: None,
                source: FigureSource::Unknown,
                unsure: false,
            },
        }
    }
}

/// What NVML reports about a GPU's make-up, read once with its facts. Each is `None` where the
/// driver or the device does not report it; a MIG instance reports its SMs only.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LiveFigures {
    /// `nvmlDeviceGetMemoryBusWidth`, bits.
    pub mem_bus_width_bits: Option<u32>,
    /// `nvmlDeviceGetMaxClockInfo(NVML_CLOCK_MEM)`, MHz.
    pub mem_clock_max_mhz: Option<f64>,
    /// `nvmlDeviceGetNumGpuCores`: the CUDA (FP32) cores.
    pub cuda_cores: Option<u32>,
    /// `nvmlDeviceGetArchitecture`, NVML's number: 5 Volta, 6 Turing, 7 Ampere, 8 Ada,
    /// 9 Hopper, 10 Blackwell.
    pub arch: Option<u32>,
    /// `nvmlDeviceGetAttributes_v2`'s multiprocessor count, which NVML gives for MIG instances.
    pub sm_count: Option<u32>,
    /// `nvmlGpmQueryDeviceSupport`.
    pub gpm_supported: Option<bool>,
}

/// Data transfers per memory clock in the clock NVML reports. NVML's memory clock is half the
/// per-pin data rate for every memory NVIDIA ships (HBM2/2e/3/3e, GDDR6/6X/7), so peak bandwidth
/// is bus bytes × 2 × clock. Checked against datasheets with clocks NVML reports: A100 SXM4
/// 80GB 5120 bits at 1593 MHz → 2,039 GB/s (datasheet 2,039); A100 40GB 5120 bits at 1215 MHz →
/// 1,555 (1,555); V100 4096 bits at 877 MHz → 898 (900); L40S 384 bits at 9001 MHz → 864 (864);
/// T4 256 bits at 5001 MHz → 320 (datasheet 300, product page 320+); GDDR7 on the RTX PRO 6000
/// Blackwell, whose nvidia-smi reads a 14,001 MHz max memory clock (an on-device report,
/// github.com/MarcoPizeta/flash-next-rtxpro6000-bench HARDWARE.md) on 512 bits → 1,792 (1,792).
pub const TRANSFERS_PER_MEM_CLOCK: f64 = 2.0;

impl LiveFigures {
    /// Peak DRAM bandwidth, GB/s: `bus_bits / 8 × 2 × mem_clock_MHz / 1000`.
    pub fn mem_bandwidth_gb_s(&self) -> Option<f64> {
        let bits = f64::from(self.mem_bus_width_bits.filter(|b| *b > 0)?);
        let mhz = self
            .mem_clock_max_mhz
            .filter(|m| m.is_finite() && *m > 0.0)?;
        Some(bits / 8.0 * TRANSFERS_PER_MEM_CLOCK * mhz / 1000.0)
    }

    /// SMs as the GPU reports them: the multiprocessor attribute where NVML gives it, else the
    /// CUDA cores divided by the architecture's FP32 cores per SM (64 on Volta and Turing, 128
    /// on Ada, Hopper and Blackwell; 64 on GA100 and 128 on GA10x, so on Ampere the divisor is
    /// the one that gives the table's count: the cores then confirm it, and without a table
    /// entry an Ampere GPU's SMs stay unread).
    pub fn sm_count(&self, table_sm_count: Option<u32>) -> Option<u32> {
        if let Some(sm) = self.sm_count.filter(|s| *s > 0) {
            return Some(sm);
        }
        let cores = self.cuda_cores.filter(|c| *c > 0)?;
        let per_sm: &[u32] = match self.arch? {
            5 | 6 => &[64],
            7 => &[64, 128],
            8..=10 => &[128],
            _ => &[],
        };
        let counts: Vec<u32> = per_sm
            .iter()
            .filter(|p| cores % **p == 0)
            .map(|p| cores / p)
            .collect();
        match counts.as_slice() {
            [one] if per_sm.len() == 1 => Some(*one),
            many => many.iter().copied().find(|c| Some(*c) == table_sm_count),
        }
    }
}

/// A SKU table entry's figures, as the calibration crate hands them over.
#[derive(Debug, Clone, PartialEq)]
pub struct TableFigures {
    /// The entry's name (`H100 NVL`).
    pub sku: String,
    /// Board power (TDP / TGP) of the form factor, W.
    pub tdp_w: f64,
    /// Peak DRAM bandwidth, GB/s.
    pub mem_bandwidth_gb_s: f64,
    /// Streaming multiprocessors.
    pub sm_count: u32,
    /// Dense tensor FP16, TFLOP/s.
    pub fp16_dense_tflops: f64,
    /// Dense tensor BF16, TFLOP/s; 0 where the part has no BF16 tensor path.
    pub bf16_dense_tflops: f64,
    /// Whether NVML's GPM metrics exist.
    pub gpm: bool,
    /// The figures the table marks unsure, by field name (`sm_count`).
    pub unsure: Vec<String>,
}

impl TableFigures {
    fn figure<T: Copy>(&self, field: &str, value: T) -> Option<(T, bool)> {
        Some((value, self.unsure.iter().any(|u| u == field)))
    }
}

/// A GPU's peak figures, each with its source.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DeviceSpec {
    /// The SKU table entry the model resolved to; `None`: the model is not in gpuslack's table,
    /// and no figure comes from a neighbour's entry.
    pub sku: Option<String>,
    /// Board power: NVML's default power limit, else the table's TDP.
    pub tdp_w: Figure<f64>,
    /// Peak DRAM bandwidth (GB/s): bus width × 2 × max memory clock, else the table's.
    pub mem_bandwidth_gb_s: Figure<f64>,
    /// Streaming multiprocessors: NVML's (the MIG attribute, or CUDA cores / cores per SM),
    /// else the table's.
    pub sm_count: Figure<u32>,
    /// Dense tensor FP16 and BF16 (TFLOP/s): the table's only; NVML reports neither.
    pub fp16_dense_tflops: Figure<f64>,
    /// Unknown where the part has no BF16 tensor path.
    pub bf16_dense_tflops: Figure<f64>,
    /// Whether GPM metrics exist: `nvmlGpmQueryDeviceSupport`, else the table's.
    pub gpm: Figure<bool>,
}

impl DeviceSpec {
    /// The figures for one GPU: each read live where NVML gave it (`tdp_w` is the default power
    /// limit NVML read, in the facts), else the table entry's, else unknown.
    pub fn resolve(
        tdp_w: Option<f64>,
        live: &LiveFigures,
        table: Option<&TableFigures>,
    ) -> DeviceSpec {
        let tdp_w = tdp_w.filter(|t| t.is_finite() && *t > 0.0);
        let t = |f: &dyn Fn(&TableFigures) -> Option<(f64, bool)>| table.and_then(f);
        DeviceSpec {
            sku: table.map(|t| t.sku.clone()),
            tdp_w: Figure::pick(tdp_w, t(&|e| e.figure("tdp_w", e.tdp_w))),
            mem_bandwidth_gb_s: Figure::pick(
                live.mem_bandwidth_gb_s(),
                t(&|e| e.figure("mem_bandwidth_gb_s", e.mem_bandwidth_gb_s)),
            ),
            sm_count: Figure::pick(
                live.sm_count(table.map(|e| e.sm_count)),
                table.and_then(|e| e.figure("sm_count", e.sm_count)),
            ),
            fp16_dense_tflops: Figure::pick(
                None,
                t(&|e| e.figure("fp16_dense_tflops", e.fp16_dense_tflops)),
            ),
            bf16_dense_tflops: Figure::pick(
                None,
                t(&|e| {
                    (e.bf16_dense_tflops > 0.0)
                        .then(|| e.figure("bf16_dense_tflops", e.bf16_dense_tflops))
                        .flatten()
                }),
            ),
            gpm: Figure::pick(
                live.gpm_supported,
                table.and_then(|e| e.figure("gpm", e.gpm)),
            ),
        }
    }

    /// For the report's facts: a line when the model is not in the table (nothing is scaled
    /// from a neighbour's specification), `None` when it is.
    pub fn unknown_note(&self) -> Option<String> {
        if self.sku.is_some() {
            return None;
        }
        let tdp = match (self.tdp_w.value, self.tdp_w.source) {
            (Some(w), FigureSource::Nvml) => format!("; TDP {w:.0} W as NVML reads it"),
            _ => String::new(),
        };
        Some(format!(
            "model not in gpuslack's table: no spec-scaled figures{tdp}"
        ))
    }

    /// One line of every figure and its source, for `doctor` and the logs:
    /// `TDP 400 W (nvml), DRAM 3,938 GB/s (nvml), 132 SMs (table), …`.
    pub fn summary(&self) -> String {
        fn one<T: Copy>(label: &str, f: &Figure<T>, show: impl Fn(T) -> String) -> String {
            let unsure = if f.unsure { ", unsure" } else { "" };
            match f.value {
                Some(v) => format!("{label} {} ({}{unsure})", show(v), f.source.as_str()),
                None => format!("{label} unknown"),
            }
        }
        [
            one("TDP", &self.tdp_w, |w| format!("{w:.0} W")),
            one("DRAM", &self.mem_bandwidth_gb_s, |b| format!("{b:.0} GB/s")),
            one("SMs", &self.sm_count, |s| s.to_string()),
            one("FP16 dense", &self.fp16_dense_tflops, |t| {
                format!("{t:.0} TFLOP/s")
            }),
            one("BF16 dense", &self.bf16_dense_tflops, |t| {
                format!("{t:.0} TFLOP/s")
            }),
            one("GPM", &self.gpm, |g| {
                if g { "yes" } else { "no" }.to_string()
            }),
        ]
        .join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h100_nvl() -> TableFigures {
        TableFigures {
            sku: "H100 NVL".into(),
            tdp_w: 400.0,
            mem_bandwidth_gb_s: 3938.0,
            sm_count: 132,
            fp16_dense_tflops: 835.0,
            bf16_dense_tflops: 835.0,
            gpm: true,
            unsure: vec!["tdp_w".into()],
        }
    }

    #[test]
    fn bandwidth_is_bus_bytes_times_two_times_the_memory_clock() {
        let bw = |bits, mhz| LiveFigures {
            mem_bus_width_bits: Some(bits),
            mem_clock_max_mhz: Some(mhz),
            ..LiveFigures::default()
        };
        // A100 SXM4 80GB and 40GB, V100, L40S, T4, RTX PRO 6000 Blackwell (GDDR7): the
        // datasheets' 2,039, 1,555, 900, 864, 320 and 1,792.
        for (bits, mhz, want) in [
            (5120, 1593.0, 2039.04),
            (5120, 1215.0, 1555.2),
            (4096, 877.0, 898.048),
            (384, 9001.0, 864.096),
            (256, 5001.0, 320.064),
            (512, 14001.0, 1792.128),
        ] {
            let got = bw(bits, mhz).mem_bandwidth_gb_s().expect("both read");
            assert!((got - want).abs() < 1e-6, "{bits} bits at {mhz} MHz: {got}");
        }
        assert_eq!(bw(0, 1593.0).mem_bandwidth_gb_s(), None);
        let no_clock = LiveFigures {
            mem_bus_width_bits: Some(5120),
            ..LiveFigures::default()
        };
        assert_eq!(no_clock.mem_bandwidth_gb_s(), None);
    }

    #[test]
    fn sms_come_from_the_cores_where_the_architecture_says_how_many_an_sm_has() {
        let cores = |arch, cores| LiveFigures {
            cuda_cores: Some(cores),
            arch: Some(arch),
            ..LiveFigures::default()
        };
        // H200 (recorded: 16896 cores), GB200 as reported on device, T4, V100.
        assert_eq!(cores(9, 16896).sm_count(None), Some(132));
        assert_eq!(cores(10, 19456).sm_count(Some(148)), Some(152));
        assert_eq!(cores(6, 2560).sm_count(None), Some(40));
        assert_eq!(cores(5, 5120).sm_count(None), Some(80));
        // Ampere: GA100 has 64 cores an SM, GA10x 128; the table's count picks.
        assert_eq!(cores(7, 6912).sm_count(Some(108)), Some(108));
        assert_eq!(cores(7, 9216).sm_count(Some(72)), Some(72));
        assert_eq!(cores(7, 6912).sm_count(None), None, "ambiguous");
        assert_eq!(cores(7, 6912).sm_count(Some(100)), None, "disagrees");
        assert_eq!(cores(3, 3072).sm_count(None), None, "Maxwell: not known");
        // A MIG instance's own count wins.
        let mig = LiveFigures {
            sm_count: Some(16),
            ..cores(9, 16896)
        };
        assert_eq!(mig.sm_count(Some(132)), Some(16));
    }

    #[test]
    fn what_nvml_reads_beats_the_table_and_says_so() {
        let live = LiveFigures {
            mem_bus_width_bits: Some(6144),
            mem_clock_max_mhz: Some(2619.0),
            cuda_cores: Some(16896),
            arch: Some(9),
            sm_count: None,
            gpm_supported: Some(true),
        };
        let spec = DeviceSpec::resolve(Some(350.0), &live, Some(&h100_nvl()));
        assert_eq!(spec.sku.as_deref(), Some("H100 NVL"));
        assert_eq!(spec.tdp_w, Figure::nvml(350.0), "the default limit read");
        let bw = spec.mem_bandwidth_gb_s;
        assert_eq!(bw.source, FigureSource::Nvml);
        assert!((bw.value.expect("bw") - 4022.784).abs() < 1e-6);
        assert_eq!(spec.sm_count, Figure::nvml(132));
        assert_eq!(spec.fp16_dense_tflops, Figure::table(835.0, false));
        assert_eq!(spec.gpm, Figure::nvml(true));
        assert_eq!(spec.unknown_note(), None);
        // Nothing read: the table's figures, its unsure marks kept.
        let spec = DeviceSpec::resolve(None, &LiveFigures::default(), Some(&h100_nvl()));
        assert_eq!(spec.tdp_w, Figure::table(400.0, true));
        assert_eq!(spec.mem_bandwidth_gb_s, Figure::table(3938.0, false));
        assert_eq!(spec.gpm, Figure::table(true, false));
        assert_eq!(
            spec.summary(),
            "TDP 400 W (table, unsure), DRAM 3938 GB/s (table), SMs 132 (table), \
             FP16 dense 835 TFLOP/s (table), BF16 dense 835 TFLOP/s (table), GPM yes (table)"
        );
    }

    #[test]
    fn a_model_not_in_the_table_gets_only_what_nvml_read() {
        let live = LiveFigures {
            mem_bus_width_bits: Some(128),
            mem_clock_max_mhz: Some(6001.0),
            cuda_cores: Some(2048),
            arch: Some(7),
            gpm_supported: Some(false),
            ..LiveFigures::default()
        };
        let spec = DeviceSpec::resolve(Some(50.0), &live, None);
        assert_eq!(spec.sku, None);
        assert_eq!(spec.tdp_w, Figure::nvml(50.0));
        assert_eq!(spec.mem_bandwidth_gb_s.source, FigureSource::Nvml);
        assert_eq!(
            spec.sm_count.source,
            FigureSource::Unknown,
            "Ampere, no table"
        );
        assert_eq!(spec.fp16_dense_tflops.value, None);
        assert_eq!(spec.bf16_dense_tflops.source, FigureSource::Unknown);
        assert_eq!(
            spec.unknown_note().as_deref(),
            Some(
                "model not in gpuslack's table: no spec-scaled figures; TDP 50 W as NVML reads it"
            )
        );
        let json = serde_json::to_value(&spec).expect("json");
        assert_eq!(json["sm_count"]["source"], "unknown");
        assert_eq!(json["tdp_w"]["source"], "nvml");
        assert_eq!(json["sku"], serde_json::Value::Null);
    }
}
