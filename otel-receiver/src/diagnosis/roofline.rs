//! The roofline principle: a `*_bound` class names the resource that binds the window, the one
//! that runs nearest its peak, not a judgement of health. Each window gets a **headroom**: that
//! resource and its fraction of peak ("DRAM at 57% of peak").
//!
//! GPM's pipe and DRAM percentages are already fractions of their peaks; PCIe rates are set
//! against the link's own peak (its generation and width, as NVML reads them). SM activity is
//! not a rate with a peak of its own (it is how much of the time the SMs held warps, the fill
//! the efficiency reads), so it never names the headroom. Without GPM the memory controller's
//! busy share stands for DRAM (a share of time, not of bandwidth: said so in the text), and
//! power against the enforced limit for the pipes. A power cap is reported beside the class
//! (`throttle`), not as the headroom: it would hide which unit the work runs nearest.
//! docs/DIAGNOSIS.md ("The roofline principle") has the recorded numbers.

use serde::Serialize;

use super::evidence::pct;
use super::{Class, Signals, Thresholds};

/// A resource a window can run near the peak of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Resource {
    /// The tensor-core pipe (GPM).
    Tensor,
    /// The FP32 pipe (GPM).
    Fp32,
    /// The FP16 pipe (GPM).
    Fp16,
    /// The FP64 pipe (GPM).
    Fp64,
    /// DRAM bandwidth (GPM).
    Dram,
    /// The memory controller's busy share of time (NVML): DRAM's stand-in without GPM.
    MemoryController,
    /// The PCIe link, against its generation's and width's peak per direction.
    Pcie,
    /// Power against the enforced limit: a compute-bound window's stand-in without pipe
    /// counters.
    Power,
}

impl Resource {
    pub fn as_str(self) -> &'static str {
        match self {
            Resource::Tensor => "tensor",
            Resource::Fp32 => "fp32",
            Resource::Fp16 => "fp16",
            Resource::Fp64 => "fp64",
            Resource::Dram => "dram",
            Resource::MemoryController => "memory_controller",
            Resource::Pcie => "pcie",
            Resource::Power => "power",
        }
    }

    /// Whether running near this resource's peak makes a window compute-bound.
    pub fn is_arithmetic(self) -> bool {
        matches!(
            self,
            Resource::Tensor | Resource::Fp32 | Resource::Fp16 | Resource::Fp64
        )
    }

    fn label(self) -> &'static str {
        match self {
            Resource::Tensor => "the tensor pipe",
            Resource::Fp32 => "the FP32 pipe",
            Resource::Fp16 => "the FP16 pipe",
            Resource::Fp64 => "the FP64 pipe",
            Resource::Dram => "DRAM bandwidth",
            Resource::MemoryController => "the memory controller",
            Resource::Pcie => "the PCIe link",
            Resource::Power => "the power limit",
        }
    }
}

/// The resource nearest its peak in a window, and how near.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Headroom {
    pub resource: Resource,
    /// Its mean over the window as a fraction of its peak (0–1).
    pub fraction: f64,
    /// The peak itself where it is known, in `peak_unit`.
    pub peak: Option<f64>,
    pub peak_unit: Option<&'static str>,
}

impl Headroom {
    /// "DRAM bandwidth at 57% of peak (4.8 TB/s)", for people.
    pub fn text(&self) -> String {
        let peak = match (self.peak, self.peak_unit) {
            (Some(p), Some(u)) => format!(" ({p:.1} {u})"),
            _ => String::new(),
        };
        let what = match self.resource {
            Resource::MemoryController => " of the time",
            Resource::Power => " of the enforced limit",
            _ => " of peak",
        };
        format!(
            "{} at {}{what}{peak}",
            self.resource.label(),
            pct(self.fraction * 100.0)
        )
    }
}

/// The peaks a window's resources are set against where a fraction is not enough: PCIe's per
/// direction from the link (MiB/s), the enforced power limit (W), and DRAM bandwidth from the
/// SKU's published figure (GB/s), each where known.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Peaks {
    pub pcie_mib_s: Option<f64>,
    pub power_limit_w: Option<f64>,
    pub dram_gb_s: Option<f64>,
}

/// PCIe bandwidth per lane and direction (GB/s) by generation: the signalling rate less its
/// line coding (8b/10b to gen 2, 128b/130b from gen 3).
fn pcie_lane_gb_s(gen: f64) -> Option<f64> {
    match gen.round() as i64 {
        1 => Some(0.25),
        2 => Some(0.5),
        3 => Some(0.985),
        4 => Some(1.969),
        5 => Some(3.938),
        6 => Some(7.563),
        _ => None,
    }
}

/// The PCIe link's peak per direction (MiB/s) for its generation and width.
pub fn pcie_peak_mib_s(gen: f64, width: f64) -> Option<f64> {
    let lane = pcie_lane_gb_s(gen)?;
    (width >= 1.0).then(|| lane * width * 1e9 / f64::from(1u32 << 20))
}

/// Every measured resource as (resource, fraction of its peak), for one window: the pipes and
/// DRAM (GPM), the memory controller's busy share where DRAM was not measured, and PCIe where
/// its link's peak is known.
pub fn resources(s: &Signals, pcie_peak_mib_s: Option<f64>) -> Vec<(Resource, f64)> {
    let mut out = Vec::with_capacity(8);
    for (r, v) in [
        (Resource::Tensor, s.tensor_pct),
        (Resource::Fp32, s.fp32_pct),
        (Resource::Fp16, s.fp16_pct),
        (Resource::Fp64, s.fp64_pct),
        (Resource::Dram, s.dram_pct),
    ] {
        if let Some(v) = v.filter(|v| v.is_finite()) {
            out.push((r, v / 100.0));
        }
    }
    if s.dram_pct.is_none() {
        if let Some(m) = s.util_mem_pct.filter(|v| v.is_finite()) {
            out.push((Resource::MemoryController, m / 100.0));
        }
    }
    if let (Some(peak), Some(_)) = (pcie_peak_mib_s.filter(|p| *p > 0.0), s.pcie_mib_s) {
        let busiest = s
            .pcie_rx_mib_s
            .unwrap_or(0.0)
            .max(s.pcie_tx_mib_s.unwrap_or(0.0));
        out.push((Resource::Pcie, busiest / peak));
    }
    out
}

/// The window's headroom: of the resources its class names (the pipes for `compute_bound`,
/// DRAM or the memory controller for `memory_bound`, PCIe for `transfer_bound`), the nearest
/// its peak; for any other class, the nearest of all. Without pipe counters a compute-bound
/// window's stand-in is power against the enforced limit. `None` where nothing was measured.
pub fn headroom(s: &Signals, class: Class, peaks: Peaks) -> Option<Headroom> {
    let Peaks {
        pcie_mib_s: pcie_peak_mib_s,
        power_limit_w,
        dram_gb_s,
    } = peaks;
    let all = resources(s, pcie_peak_mib_s);
    let named: Vec<(Resource, f64)> = all
        .iter()
        .copied()
        .filter(|(r, _)| match class {
            Class::ComputeBound => r.is_arithmetic(),
            Class::MemoryBound => matches!(r, Resource::Dram | Resource::MemoryController),
            Class::TransferBound => *r == Resource::Pcie,
            _ => true,
        })
        .collect();
    let power = match (class, s.power_w, power_limit_w) {
        (Class::ComputeBound, Some(p), Some(limit)) if named.is_empty() && limit > 0.0 => {
            Some((Resource::Power, p / limit))
        }
        _ => None,
    };
    let (resource, fraction) = named
        .into_iter()
        .chain(power)
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .or_else(|| all.into_iter().max_by(|a, b| a.1.total_cmp(&b.1)))?;
    let (peak, peak_unit) = match resource {
        Resource::Pcie => (pcie_peak_mib_s.map(|p| p / 1024.0), Some("GiB/s")),
        Resource::Power => (power_limit_w, Some("W")),
        Resource::Dram => (dram_gb_s.map(|g| g / 1000.0), Some("TB/s")),
        _ => (None, None),
    };
    Some(Headroom {
        resource,
        fraction: super::round3(fraction.max(0.0)),
        peak,
        peak_unit: peak.and(peak_unit),
    })
}

/// The unit nearest its peak among DRAM and every measured pipe: what Nsight Compute's
/// speed-of-light sets against its 60% line. PCIe, NVLink and the memory controller's share of
/// time are not among them: they are not the SMs' units.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TopUnit {
    pub resource: Resource,
    /// Its mean over the window (% of peak).
    pub pct: f64,
    /// The same per share of the window the kernels ran ([`Signals::busy_share`]): what the
    /// line is set against, so that a pause in the window does not read as latency.
    pub busy_pct: f64,
}

impl TopUnit {
    /// Whether the unit binds: at or above the line.
    pub fn binds(&self, th: &Thresholds) -> bool {
        self.busy_pct >= th.bound_line_pct
    }

    /// Whether the unit sits in the band around the line, where either side may be right.
    pub fn near_line(&self, th: &Thresholds) -> bool {
        self.busy_pct >= th.bound_line_pct - th.bound_band_pct
            && self.busy_pct < th.bound_line_pct + th.bound_band_pct
    }

    /// The class the unit names when it binds: DRAM bandwidth or arithmetic.
    pub fn bound_class(&self) -> Class {
        if self.resource == Resource::Dram {
            Class::MemoryBound
        } else {
            Class::ComputeBound
        }
    }

    /// The class on the line's side the unit sits: its bound class, or `latency_bound`.
    pub fn class(&self, th: &Thresholds) -> Class {
        if self.binds(th) {
            self.bound_class()
        } else {
            Class::LatencyBound
        }
    }

    /// The class across the line: what a verdict in the band names as its alternative.
    pub fn other_side(&self, th: &Thresholds) -> Class {
        if self.binds(th) {
            Class::LatencyBound
        } else {
            self.bound_class()
        }
    }

    /// "the tensor pipe", "DRAM bandwidth": for sentences.
    pub fn label(&self) -> &'static str {
        self.resource.label()
    }
}

/// The window's top unit ([`TopUnit`]); `None` without GPM's DRAM or pipe readings. A tie goes
/// to the pipe.
pub fn top_unit(s: &Signals) -> Option<TopUnit> {
    let (resource, pct) = [
        (Resource::Tensor, s.tensor_pct),
        (Resource::Fp32, s.fp32_pct),
        (Resource::Fp16, s.fp16_pct),
        (Resource::Fp64, s.fp64_pct),
        (Resource::Dram, s.dram_pct),
    ]
    .into_iter()
    .filter_map(|(r, v)| v.filter(|v| v.is_finite()).map(|v| (r, v)))
    .reduce(|best, next| if next.1 > best.1 { next } else { best })?;
    Some(TopUnit {
        resource,
        pct,
        busy_pct: pct / s.busy_share(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_is_bound_by_dram_and_says_how_far_from_peak() {
        // h200-middle-ground's decode in CUDA graphs: DRAM 57.2%, tensor 8.1%, SM 69%.
        let s = Signals {
            tensor_pct: Some(8.1),
            fp32_pct: Some(2.0),
            dram_pct: Some(57.2),
            sm_pct: Some(69.0),
            util_mem_pct: Some(73.0),
            ..Signals::default()
        };
        let h = headroom(&s, Class::MemoryBound, Peaks::default()).expect("headroom");
        assert_eq!(h.resource, Resource::Dram);
        assert_eq!(h.fraction, 0.572);
        assert_eq!(h.text(), "DRAM bandwidth at 57% of peak");
        // With the SKU's published bandwidth (an H200: 4,800 GB/s), the peak itself.
        let h200 = Peaks {
            dram_gb_s: Some(4800.0),
            ..Peaks::default()
        };
        let h = headroom(&s, Class::MemoryBound, h200).expect("headroom");
        assert_eq!(h.text(), "DRAM bandwidth at 57% of peak (4.8 TB/s)");
        // The top unit: DRAM for decode, under the line (latency) and in its band.
        let th = Thresholds::default();
        let top = top_unit(&s).expect("top unit");
        assert_eq!(
            (top.resource, top.class(&th)),
            (Resource::Dram, Class::LatencyBound)
        );
        assert!(top.near_line(&th));
        assert_eq!(top.other_side(&th), Class::MemoryBound);
        // A tie goes to the pipe; at the line a pipe binds, a hair under it does not.
        let tie = Signals {
            tensor_pct: Some(60.0),
            dram_pct: Some(60.0),
            ..Signals::default()
        };
        let top = top_unit(&tie).expect("top unit");
        assert_eq!(
            (top.resource, top.class(&th)),
            (Resource::Tensor, Class::ComputeBound)
        );
        assert_eq!(top.other_side(&th), Class::LatencyBound);
        let under = Signals {
            tensor_pct: Some(59.999),
            ..tie
        };
        assert_eq!(
            top_unit(&under).expect("top").class(&th),
            Class::MemoryBound
        );
        let under = Signals {
            tensor_pct: Some(59.999),
            dram_pct: Some(59.999),
            ..Signals::default()
        };
        assert_eq!(
            top_unit(&under).expect("top").class(&th),
            Class::LatencyBound
        );
        // Kernels resident 60% of the window: 40% of the window is 67% while they ran.
        let paused = Signals {
            util_pct: Some(60.0),
            fp32_pct: Some(40.0),
            ..Signals::default()
        };
        let top = top_unit(&paused).expect("top");
        assert!((top.busy_pct - 66.667).abs() < 0.01, "{}", top.busy_pct);
        assert_eq!(top.class(&th), Class::ComputeBound);
        assert_eq!(top_unit(&Signals::default()), None);
        // A compute-bound verdict's headroom is its busiest pipe, whatever DRAM reads (a
        // convnet: tensor 45%, DRAM 30%), and any class else takes the nearest of all.
        let conv = Signals {
            tensor_pct: Some(45.3),
            dram_pct: Some(30.4),
            ..Signals::default()
        };
        let h = headroom(&conv, Class::ComputeBound, Peaks::default()).expect("headroom");
        assert_eq!(h.resource, Resource::Tensor);
        let h = headroom(&conv, Class::MemoryBound, Peaks::default()).expect("headroom");
        assert_eq!(h.resource, Resource::Dram);
        let h = headroom(&conv, Class::InputStarved, Peaks::default()).expect("headroom");
        assert_eq!(h.resource, Resource::Tensor);
    }

    #[test]
    fn pcie_is_set_against_its_link_and_power_stands_in_for_the_pipes_without_gpm() {
        // Gen 5 ×16: 3.938 GB/s a lane, 63 GB/s a direction; pinned copies ran 55 GiB/s.
        let peak = pcie_peak_mib_s(5.0, 16.0).expect("gen 5");
        assert!((peak / 1024.0 - 58.68).abs() < 0.01, "{peak}");
        assert_eq!(pcie_peak_mib_s(9.0, 16.0), None);
        assert_eq!(pcie_peak_mib_s(5.0, 0.0), None);
        let copies = Signals {
            pcie_mib_s: Some(56_320.0),
            pcie_rx_mib_s: Some(56_320.0),
            pcie_tx_mib_s: Some(0.0),
            sm_pct: Some(0.0),
            dram_pct: Some(1.0),
            power_w: Some(127.0),
            ..Signals::default()
        };
        let h = headroom(
            &copies,
            Class::TransferBound,
            Peaks {
                pcie_mib_s: Some(peak),
                power_limit_w: Some(700.0),
                dram_gb_s: None,
            },
        )
        .expect("h");
        assert_eq!(h.resource, Resource::Pcie);
        assert!((h.fraction - 0.937).abs() < 0.001, "{}", h.fraction);
        assert_eq!(h.text(), "the PCIe link at 94% of peak (58.7 GiB/s)");
        // Without GPM: a compute-bound window is placed by power against its limit, a
        // memory-bound one by the memory controller, as a share of time.
        let limit = Peaks {
            power_limit_w: Some(700.0),
            ..Peaks::default()
        };
        let nogpm = Signals {
            util_mem_pct: Some(25.0),
            power_w: Some(691.0),
            ..Signals::default()
        };
        let h = headroom(&nogpm, Class::ComputeBound, limit).expect("h");
        assert_eq!(h.resource, Resource::Power);
        assert_eq!(
            h.text(),
            "the power limit at 99% of the enforced limit (700.0 W)"
        );
        let h = headroom(&nogpm, Class::MemoryBound, limit).expect("h");
        assert_eq!(h.text(), "the memory controller at 25% of the time");
        assert_eq!(
            headroom(&Signals::default(), Class::Idle, Peaks::default()),
            None
        );
    }
}
